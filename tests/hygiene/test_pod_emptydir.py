"""A pod's memory emptyDir at /dev/shm, judged from the host's mount table and named by the
CRI runtime itself: between a crash and the kubelet's next attempt (no process of the pod
has it mounted) and after the restart, a crashed attempt's files are left by that attempt,
never by the pod's sandbox (pause) container, which never has the volume; the live
attempt's files are no leftovers. The runtime is a real gRPC server answering as
containerd does; its answer is recorded into the host, as `snapshot` records one."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
from hygiene_fakes import NOW, FakeHost

from accelhost.host.base import FileStat
from accelhost.host.live import LiveHost
from accelhost.hygiene.doctor.checks import run_checks
from accelhost.hygiene.facts.host import read_facts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher
from container_hosts import cid, put_in_container
from cri_server import FakeContainer, FakeCri, FakePod, cri_server

UID = "5a1e0c3b-7d2f-4b8e-9a6c-1f2e3d4c5b6a"
KUBELET = "/var/lib/kubelet"
VOLUME = f"{KUBELET}/pods/{UID}/volumes/kubernetes.io~empty-dir/dshm"
SANDBOX, CRASHED, LIVE = cid(0x30), cid(0x31), cid(0x32)
DEV = os.makedev(0, 77)  # the emptyDir's tmpfs
MOUNTINFO = (
    "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
    "27 22 0:26 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw\n"
    f"90 22 0:77 / {VOLUME} rw,relatime shared:40 - tmpfs tmpfs rw,size=1048576k\n"
)
OLD, NEW = "psm_0a1b2c3d", "psm_9f8e7d6c"


def _look(restarted: bool) -> dict[str, Any]:
    """The runtime's answer: attempt 0 crashed; with `restarted`, attempt 1 serves."""
    pod = FakePod(SANDBOX, "vllm-0", "serving", UID, created_s=int(NOW - 4000))
    mounts = [("/dev/shm", VOLUME)]
    containers = [
        FakeContainer(
            CRASHED, pod, "engine", 0, False, int(NOW - 3000), int(NOW - 2000), 0, mounts=mounts
        )
    ]
    if restarted:
        containers.append(
            FakeContainer(LIVE, pod, "engine", 1, True, int(NOW - 1900), 0, 4242, mounts=mounts)
        )
    with cri_server(FakeCri(pods=[pod], containers=containers)) as path:
        answer = LiveHost().cri_look(path)
    assert answer is not None and "error" not in answer
    return answer


def _host(restarted: bool) -> tuple[FakeHost, HygieneOptions]:
    fake = FakeHost()
    fake.files["/proc/self/mountinfo"] = MOUNTINFO
    fake.stats[KUBELET] = FileStat("kubelet", "dir", 4096, 8, 0, "root", NOW, NOW, 2049, 5)
    fake.stat_dirs["/dev/shm"] = []  # the host's own, empty
    fake.proc(4100, "/pause", ppid=1, pgid=4100, start_s=100.0)
    put_in_container(fake, 4100, f"/kubepods/burstable/pod{UID}/{SANDBOX}", ipc=4026532900)
    files = [(OLD, NOW - 2500, 11)]  # born while attempt 0 ran
    if restarted:
        fake.proc(
            4242,
            "python3 -m vllm.entrypoints.openai.api_server --model m",
            ppid=1,
            pgid=4242,
            start_s=8200.0,
            fds={7: f"/dev/shm/{NEW}"},  # the live attempt holds its file by its own path
        )
        put_in_container(
            fake, 4242, f"/kubepods/burstable/pod{UID}/{LIVE}", ipc=4026532900, nspid=(4242, 1)
        )
        files.append((NEW, NOW - 1800, 12))
        fake.stats["/proc/4242/fd/7"] = FileStat(
            NEW, "file", 4096, 8, 0, "root", *(NOW - 1800,) * 2, DEV, 12
        )
    fake.stat_dirs[VOLUME] = [
        FileStat(name, "file", 1 << 20, 2048, 0, "root", t, t, DEV, ino, birth=t)
        for name, t, ino in files
    ]
    fake.cri["/run/accelhost-test/cri.sock"] = _look(restarted)
    opts = HygieneOptions(cri_sockets=("/run/accelhost-test/cri.sock",), kubelet_root=KUBELET)
    return fake, opts


def _leftovers(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    check = next(c for c in report["checks"] if c["name"] == "posix_shm")
    return {os.path.basename(e["path"]): e for e in check["evidence"] if "path" in e}


@pytest.mark.parametrize("restarted", [False, True], ids=["between-attempts", "restarted"])
def test_a_crashed_attempts_files_are_named_by_that_attempt_of_the_pod(restarted: bool) -> None:
    fake, opts = _host(restarted)
    facts = read_facts(fake.host(), opts)
    report = run_checks(facts, opts).to_dict()
    found = _leftovers(report)
    assert OLD in found, report["checks"]
    assert NEW not in found  # the live attempt holds it
    left = found[OLD]["left_by"]
    assert not left["ambiguous"] and not left["others_possible"], left
    (who,) = left["containers"]
    assert who["id"] == CRASHED and who["attempt"] == 0, who
    assert (who["pod"]["namespace"], who["pod"]["name"]) == ("serving", "vllm-0")


def test_a_kubelet_root_that_does_not_exist_is_said_once() -> None:
    fake, _ = _host(False)
    opts = HygieneOptions(kubelet_root="/nowhere/kubelet")
    facts = read_facts(fake.host(), opts)
    assert facts.containers is not None
    notes = [n for n in facts.containers.view.notes if "/nowhere/kubelet" in n]
    assert notes == ["kubelet root /nowhere/kubelet: no such directory"]


def test_container_init_names_the_pod_and_fixes_it_in_kubernetes_words() -> None:
    fake, opts = _host(True)
    check = run_checks(read_facts(fake.host(), opts), opts, ("container_init",)).checks[0]
    assert check.status == "WARN", check
    assert "serving/vllm-0 (engine)" in check.summary
    assert 'command: ["accelhost", "run", "--"' in check.fix
    assert "accelhost clean --container serving/vllm-0" in check.fix
    assert "docker" not in check.fix and "--ipc" not in check.fix


def test_a_pod_no_runtime_names_is_still_fixed_in_kubernetes_words() -> None:
    """No CRI socket answers (a runtime not asked, or down): the engine's cgroup still says
    it is a pod's container, so its fix is the pod spec's, cleaned by the container's id,
    never Docker's flags."""
    fake, _ = _host(True)
    opts = HygieneOptions(kubelet_root=KUBELET)  # no CRI socket named; none at the usual
    check = run_checks(read_facts(fake.host(), opts), opts, ("container_init",)).checks[0]
    assert check.status == "WARN", check
    assert 'command: ["accelhost", "run", "--"' in check.fix, check.fix
    assert f"accelhost clean --container {LIVE[:12]}" in check.fix, check.fix
    assert "docker" not in check.fix and "--ipc" not in check.fix, check.fix


def test_a_watch_judges_a_young_emptydir_file_when_it_comes_of_age() -> None:
    """A crashed attempt's file in its pod's emptyDir, 2 s old under --shm-min-age 5: the
    watch's next round is due in 3 s, not one --interval later (before, only the host's
    shm dirs were scheduled: with --interval 5 such a file went up to 10 s after a crash,
    past the kubelet's first restart)."""
    fake, opts = _host(False)
    born = NOW - 2
    fake.stat_dirs[VOLUME] = [
        FileStat(OLD, "file", 1 << 20, 2048, 0, "root", born, born, DEV, 11, birth=born)
    ]
    opts = dataclasses.replace(opts, shm_min_age_s=5.0)
    watcher = Watcher(fake.host, opts, WatchConfig(interval_s=5.0), lambda _e: None)
    watcher.run_once()
    assert watcher._state.next_due(NOW) == pytest.approx(3.0)
    assert watcher._state.next_due(NOW + 4) == 0.0  # overdue: at once
