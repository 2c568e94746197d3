"""`accelhost run --expect-util / --bind`, and the supervisor's pure parts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from run_support import janitor, run_cmd

from accelhost.containers.pod_volumes import Mount, parse_mountinfo
from accelhost.host.live import LiveHost
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.supervisor.leftovers import SegmentLedger, remove_leaked
from accelhost.supervisor.spawn import _candidates, read_own_cgroups
from accelhost.supervisor.tree import TreeScanner, scan_tree

MARGIN_S = 30.0
A2 = "example:a2-192cpu-8npu-sees-npu0"  # npu0: 64 GiB, a few GiB free
GPU = "example:gpu-cpuset-slice"


def finish(proc: subprocess.Popen[bytes], timeout: float = MARGIN_S) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def test_preflight_that_passes_starts_the_command(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--snapshot", A2, "--expect-util", "0.05", "--device", "0", "--")
            + ["sh", "-c", "exit 4"]
        )
        code, err = finish(proc)
    assert code == 4, err


def test_bind_to_an_unplanned_device_is_refused_before_the_start(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--snapshot", GPU, "--bind", "7", "--", "touch", str(marker)))
        code, err = finish(proc)
    assert code == 1
    # planned as `accelhost bind` plans: the host's plan, then this device alone, which
    # says why it cannot be planned (the host has no such GPU)
    assert err.strip().splitlines() == [
        "accelhost: cannot plan: GPU 7 is not visible (visible GPUs: 0, 1)"
    ]
    assert not marker.exists()


def test_bind_plans_a_device_no_engine_runs_on_yet_as_bind_does() -> None:
    """`run --bind 3` starts the engine that will open device 3: the host's plan (devices
    with an engine) lacks it, so it is planned alone, as `accelhost bind --device 3` does."""
    from accelhost.api import plan, plan_for_device
    from accelhost.supervisor.integrations import bind_plan
    from ascend_hosts import AscendHost, even_nodes

    host = AscendHost("A2", 1, 8, even_nodes(192, 4), range(192), running=[0, 1]).host()
    assert [d.device for d in plan(host).devices] == [0, 1]  # no engine on 3 yet
    said: list[str] = []
    device, planned = bind_plan(host, "3", None, [], True, said.append)
    assert device == 3 and planned is not None and said == []
    alone = plan_for_device(host, 3)
    assert planned.device(3) == alone.device(3) == plan(host, devices=[3]).device(3)
    # a device the host's plan has is taken from that plan, unchanged
    _, first = bind_plan(host, "1", None, [], True, said.append)
    assert first is not None and first.device(1) == plan(host).device(1)


def test_bind_applies_the_plan_after_the_delay_and_never_stops_the_engine(
    tmp_path: Path,
) -> None:
    # The recorded plan's CPUs need not exist here: the steps may fail, the engine runs on.
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--snapshot", GPU, "--bind", "0", "--bind-delay", "0.3", "--")
            + [sys.executable, "-c", "import time; time.sleep(2); raise SystemExit(6)"]
        )
        code, err = finish(proc)
    assert code == 6, err
    lines = [x for x in err.splitlines() if x.startswith("accelhost run: --bind:")]
    assert lines and "to device 0 (after 0.3 s)" in lines[0]
    assert any("step(s) done" in x for x in lines)
    assert "Traceback" not in err


# ---- pure and small parts ------------------------------------------------------------------

MOUNTINFO = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 /docker/abc /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
OWN = "9:name=systemd:/\n8:pids:/docker/abc/x\n6:freezer:/\n0::/svc\n"


def test_cgroup_candidates_prefer_v2_then_v1_freezer_and_map_container_roots() -> None:
    mounts = parse_mountinfo(MOUNTINFO)
    own = read_own_cgroups(OWN)
    assert [m.fstype for m in mounts] == ["tmpfs", "cgroup", "cgroup", "cgroup2"]
    assert mounts[2].options == {"rw", "pids"}
    assert own == {"name=systemd": "/", "pids": "/docker/abc/x", "freezer": "/", "": "/svc"}
    assert _candidates("auto", mounts, own) == [
        (2, "/sys/fs/cgroup/unified/svc"),
        (1, "/sys/fs/cgroup/freezer/"),
    ]
    no_freezer = [m for m in mounts if "freezer" not in m.options]
    # the pids mount shows only /docker/abc: our /docker/abc/x is its ./x
    assert _candidates("1", no_freezer, own) == [(1, "/sys/fs/cgroup/pids/x")]
    assert (
        _candidates("2", [Mount(1, 0, "/", "/p", "cgroup", "cgroup", frozenset({"pids"}))], own)
        == []
    )


def _seg(shmid: int, cpid: int, nattch: int = 0, perms: int = 0o600) -> ShmSegment:
    return ShmSegment(0, shmid, perms, 4096, cpid, cpid, nattch, 0, 0, 0, 0, 0, 0, 0)


class _ShmHost:
    """/proc/sysvipc/shm from a list the test controls, and which pids are alive."""

    def __init__(self, segments: list[ShmSegment], alive: tuple[int, ...] = ()) -> None:
        self.segments = segments
        self.alive = alive

    def read_file(self, path: str) -> str | None:
        if path.startswith("/proc/") and path.endswith("/stat"):
            pid = int(path.split("/")[2])
            return f"{pid} (x) S 1 {pid} {pid} 0 -1 0\n" if pid in self.alive else None
        assert path == "/proc/sysvipc/shm"
        head = "key shmid perms size cpid lpid nattch uid gid cuid cgid atime dtime ctime\n"
        rows = [
            f"{s.key} {s.shmid} {s.perms:o} {s.size} {s.cpid} {s.lpid} {s.nattch} 0 0 0 0 0 0 0"
            for s in self.segments
        ]
        return head + "\n".join(rows) + "\n"


def test_only_new_unattached_segments_of_the_tree_are_removed() -> None:
    host = _ShmHost([_seg(1, cpid=100)], alive=(600,))  # existed before the run
    ledger = SegmentLedger.start(host)  # type: ignore[arg-type]
    ledger.absorb([100, 200, 300])
    # what the process events saw: 400 (a grandchild that exited unseen by any scan), 500
    # (a member whose pid an outsider got later), 600 (a member whose pid is alive now)
    ledger.absorb([400, 500, 600], ambiguous=[500])
    host.segments += [
        _seg(2, cpid=200),  # ours, leaked: removed
        _seg(3, cpid=300, nattch=1),  # ours, still attached by someone: kept
        _seg(4, cpid=999),  # someone else's: kept
        _seg(5, cpid=200, perms=0o1600),  # already marked for destruction: left to the kernel
        _seg(6, cpid=400),  # made by the short-lived grandchild: removed
        _seg(7, cpid=500),  # creator pid ambiguous: kept
        _seg(8, cpid=600),  # creator pid belongs to a live process now: kept
    ]
    removed: list[int] = []
    lines: list[str] = []
    out = remove_leaked(host, ledger, lines.append, remove=removed.append)  # type: ignore[arg-type]
    assert removed == [2, 6]
    assert [r.shmid for r in out] == [2, 6]
    assert any("kept shared memory shmid 3" in x for x in lines)
    assert any("kept shared memory shmid 8" in x and "pid 600" in x for x in lines)
    unsure = [x for x in lines if "kept shared memory shmid 7" in x]
    assert len(unsure) == 1 and "pid 500" in unsure[0] and "cannot be told" in unsure[0]


def test_cheap_rescans_see_what_a_full_scan_sees() -> None:
    with subprocess.Popen(["sleep", "30"]) as a, subprocess.Popen(["sleep", "30"]) as b:
        try:
            host = LiveHost()
            scanner = TreeScanner(host, os.getpid())
            first = scanner.scan()
            assert {a.pid, b.pid} <= set(first)
            with subprocess.Popen(["sleep", "30"]) as c:
                try:
                    cheap = scanner.scan()  # the second scan skips pids known outside
                    assert set(cheap) == set(scan_tree(host, os.getpid()))
                    assert c.pid in cheap
                finally:
                    c.kill()
        finally:
            a.kill()
            b.kill()
