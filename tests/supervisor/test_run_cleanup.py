"""`accelhost run`: shared memory, --fail-on-exit, PID 1 of a namespace, --cgroup."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from run_support import (
    PY,
    helper,
    janitor,
    live_shmids,
    ours_alive,
    recorded_pids,
    run_cmd,
    wait_for,
)
from tree_helper import shmget

MARGIN_S = 15.0


def finish(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def read_shmids(out: Path) -> list[int]:
    path = out / "shmids"
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def test_segments_left_by_the_tree_are_removed_and_others_kept(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        foreign = shmget()  # made before the run, by someone else: must survive it
        j.shmids.append(foreign)
        try:
            proc = j.start(
                run_cmd("--grace", "0.5", "--", *helper("shm", tmp_path, "--with-child"))
            )
            code, err = finish(proc, MARGIN_S)
        finally:
            j.shmids += read_shmids(tmp_path)
        ours = read_shmids(tmp_path)
        remaining = live_shmids()
    assert code == 0, err
    assert len(ours) == 2
    assert not set(ours) & remaining
    assert foreign in remaining
    for shmid in ours:
        assert f"removed shared memory shmid {shmid}" in err


def test_keep_shm_leaves_segments(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        try:
            proc = j.start(run_cmd("--keep-shm", "--", *helper("shm", tmp_path)))
            code, _ = finish(proc, MARGIN_S)
        finally:
            j.shmids += read_shmids(tmp_path)
        ours = read_shmids(tmp_path)
        assert code == 0
        assert len(ours) == 1 and ours[0] in live_shmids()


def test_fail_on_exit_turns_an_engine_death_into_a_failure(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--grace", "1", "--fail-on-exit", "FAKE::EngineCore", "--")
            + helper("engine", tmp_path),
            env={**os.environ, "ENGINE_LIFETIME": "1.5"},
        )
        started = time.monotonic()
        code, err = finish(proc, MARGIN_S)
        elapsed = time.monotonic() - started
        left = [p for p in recorded_pids(tmp_path) if ours_alive(p, str(tmp_path))]
    assert code == 1, err
    assert "FAKE::EngineCore" in err and "--fail-on-exit" in err
    assert left == []
    assert elapsed < MARGIN_S


def test_fail_on_exit_sees_a_title_that_appears_after_the_start(tmp_path: Path) -> None:
    # Engines retitle their processes once running (setproctitle); here the same pid execs
    # into the marked program a second after it started, then dies unnoticed by its parent.
    # The marker is in a sourced file, not on any command line before the exec.
    core = tmp_path / "core.sh"
    core.write_text("exec " + " ".join(helper("engine-core", tmp_path, "FAKE::EngineCore")))
    script = f"(sleep 1; . {core}) & sleep 60"
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--grace", "1", "--fail-on-exit", "FAKE::EngineCore", "--", "sh", "-c")
            + [script],
            env={**os.environ, "ENGINE_LIFETIME": "1.5"},
        )
        code, err = finish(proc, MARGIN_S)
    assert code == 1, err
    assert "FAKE::EngineCore" in err


def test_fail_on_exit_does_not_fire_when_nothing_matches_dies(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--grace", "1", "--fail-on-exit", "FAKE::EngineCore", "--")
            + helper("tree", tmp_path, "--exit-0")
        )
        code, err = finish(proc, MARGIN_S)
    assert code == 0, err


def _can_unshare() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=30
    )
    return probe.returncode == 0


@pytest.mark.skipif(not _can_unshare(), reason="cannot create PID namespaces here")
def test_pid1_of_a_new_pid_namespace_reaps_and_tears_down(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(
            ["unshare", "--pid", "--fork", "--mount-proc"]
            + run_cmd("--grace", "2", "--")
            + helper("pid1", tmp_path)
        )
        code, err = finish(proc, MARGIN_S)
    assert code == 3, err
    assert (tmp_path / "pid1").read_text().split() == ["supervisor_is_pid1=True", "zombies=0"]
    # The straggler got our SIGTERM (the kernel's kill at PID 1's exit is an untrappable
    # SIGKILL, so this file proves the teardown ran before the supervisor left).
    assert (tmp_path / "straggler-term").read_text().strip() == "TERM"


def _cgroup_writable(version: str) -> bool:
    from accelhost.supervisor.spawn import CgroupError, create_cgroup

    try:
        cg = create_cgroup(version, f"accelhost-probe-{os.getpid()}")
    except CgroupError:
        return False
    cg.remove()
    return True


@pytest.mark.parametrize("version", ["1", "2"])
def test_cgroup_tracks_and_tears_down_the_tree(tmp_path: Path, version: str) -> None:
    if not _cgroup_writable(version):
        pytest.skip(f"no writable cgroup v{version} here")
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--grace", "1", "--cgroup", "--cgroup-version", version, "--")
            + helper("tree", tmp_path, "--ignore-term")
        )
        wait_for(lambda: len(recorded_pids(tmp_path)) == 4, what="the tree to start")
        pids = recorded_pids(tmp_path)
        groups = {Path(f"/proc/{p}/cgroup").read_text() for p in pids}
        assert len(groups) == 1 and f"accelhost-run-{proc.pid}" in groups.pop()
        proc.send_signal(signal.SIGTERM)
        code, err = finish(proc, MARGIN_S)
        left = [p for p in pids if ours_alive(p, str(tmp_path))]
    assert code == 128 + signal.SIGTERM, err
    assert left == []
    assert "could not remove cgroup" not in err


def test_cgroup_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    from accelhost.containers.pod_volumes import Mount
    from accelhost.supervisor.spawn import _candidates

    # Asked for v2 on a host with only v1 mounted: nothing to try.
    only_v1 = [Mount(1, 0, "/", "/sys/fs/cgroup/pids", "cgroup", "cgroup", frozenset({"pids"}))]
    assert _candidates("2", only_v1, {"pids": "/"}) == []
    if shutil.which("unshare") is None or not Path("/sys/fs/cgroup").is_dir():
        pytest.skip("needs unshare and /sys/fs/cgroup")
    # As in a container with a read-only /sys/fs/cgroup: a private mount namespace in which
    # every cgroup mount is remounted read-only (the host's mounts are untouched).
    marker = tmp_path / "started"
    argv = " ".join(run_cmd("--cgroup", "--", "touch", str(marker)))
    script = (
        "for m in /sys/fs/cgroup/*/ /sys/fs/cgroup; do "
        "mount -o remount,bind,ro $m 2>/dev/null; done; exec " + argv
    )
    with janitor(tmp_path) as j:
        proc = j.start(["unshare", "--mount", "--propagation", "private", "sh", "-c", script])
        code, err = finish(proc, MARGIN_S)
    if "unshare:" in err:
        pytest.skip("cannot create mount namespaces here")
    assert code == 1, err
    assert err.startswith("accelhost: --cgroup: cannot create") and len(err.splitlines()) == 1
    assert "Read-only file system" in err
    assert not marker.exists()


def test_supervisor_is_importable_without_heavy_modules() -> None:
    code = (
        "import sys, accelhost.cli.run, accelhost.supervisor; "
        "heavy = [m for m in ('accelhost.hygiene', 'accelhost.apply', 'accelhost.api', "
        "'prometheus_client', 'psutil') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stderr
