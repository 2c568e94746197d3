"""`accelhost run` must not harm what is not its tree: another cgroup's processes, a segment
another live program used last, a host seen through a foreign /proc, and the graceful stop
of what the command left when a stop signal comes just after the command's own exit."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
from pathlib import Path

import pytest
from run_support import PY, janitor, live_shmids, run_cmd, state, wait_for

from accelhost.supervisor.spawn import CgroupError, create_cgroup, join_cgroup

MARGIN_S = 30.0


def finish(proc: subprocess.Popen[bytes], timeout: float = MARGIN_S) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def _can_unshare_pid() -> bool:
    try:
        probe = subprocess.run(["unshare", "--pid", "--fork", "true"], timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


@pytest.mark.parametrize("version", ["1", "2"])
def test_an_existing_cgroup_of_the_same_name_is_never_adopted(tmp_path: Path, version: str) -> None:
    # A run killed with -9 leaves its cgroup and its engine; a later run that gets the same
    # pid (or is PID 1 again) must not take them for its own tree.
    name = f"accelhost-run-test-{os.getpid()}"
    try:
        theirs = create_cgroup(version, name)
    except CgroupError:
        pytest.skip(f"no writable cgroup v{version} here")
    made = [theirs]
    with janitor(tmp_path) as j:
        try:
            sleeper = j.start(["sleep", "300", str(tmp_path)])
            join_cgroup(theirs, sleeper.pid)
            mine = create_cgroup(version, name)
            made.append(mine)
            assert mine.path != theirs.path
            assert mine.path.startswith(theirs.path)  # the same name, told apart
            assert sleeper.pid not in mine.pids()
        finally:
            j.cleanup()
            for cg in reversed(made):
                cg.remove()
    assert not any(os.path.exists(cg.path) for cg in made)


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    lib.shmat.restype = ctypes.c_void_p
    lib.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.shmdt.argtypes = [ctypes.c_void_p]
    return lib


# The command makes a segment, says its id, and ends once the test has used it.
_MAKE_SEGMENT = """
import ctypes, os, sys, time
out = sys.argv[1]
shmid = ctypes.CDLL(None).shmget(0, 4096, 0o1600)
with open(os.path.join(out, "shmid.tmp"), "w") as fh:
    fh.write(str(shmid))
os.rename(os.path.join(out, "shmid.tmp"), os.path.join(out, "shmid"))
while not os.path.exists(os.path.join(out, "used")):
    time.sleep(0.05)
"""


def test_a_segment_a_live_outsider_used_last_is_kept(tmp_path: Path) -> None:
    # The tree makes a segment and ends; a program outside it (this test) attached and
    # detached it meanwhile and lives on: it is that program's to keep, as for `doctor`.
    made, used = tmp_path / "shmid", tmp_path / "used"
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "1", "--", PY, "-c", _MAKE_SEGMENT, str(tmp_path)))
        try:
            wait_for(made.exists, what="the segment")
            shmid = int(made.read_text())
            j.shmids.append(shmid)
            lib = _libc()
            addr = lib.shmat(shmid, None, 0)
            assert addr not in (None, ctypes.c_void_p(-1).value)
            assert lib.shmdt(ctypes.c_void_p(addr)) == 0
            used.write_text("used")
            status, err = finish(proc)
            remaining = live_shmids()
        finally:
            j.cleanup()
    assert status == 0, err
    assert shmid in remaining, err
    assert f"its last user pid {os.getpid()} is alive" in err


@pytest.mark.skipif(not _can_unshare_pid(), reason="cannot create PID namespaces here")
def test_proc_of_another_pid_namespace_is_refused_before_the_start(tmp_path: Path) -> None:
    # PID 1 of a new PID namespace that still sees the host's /proc: every host process
    # would pass for the tree (scanned, its files counted as the tree's), and no pid read
    # there names the same process in here. Refused, nothing started.
    marker = tmp_path / "started"
    with janitor(tmp_path) as j:
        proc = j.start(
            ["unshare", "--pid", "--fork"]
            + run_cmd("--keep-shm", "--grace", "1", "--", "touch", str(marker))
        )
        code, err = finish(proc)
    assert code == 1, err
    assert err == "accelhost: run needs /proc of its own PID namespace (mount one)\n"
    assert not marker.exists()


# The command starts a child in its own group that records a SIGTERM and exits on it, then
# waits to be killed.
_GROUP = """
import os, signal, sys, time
out = sys.argv[1]
if os.fork() == 0:
    def term(_s, _f):
        open(os.path.join(out, "term"), "w").write("TERM")
        os._exit(0)
    signal.signal(signal.SIGTERM, term)
    open(os.path.join(out, "child"), "w").write(str(os.getpid()))
    while True:
        time.sleep(3600)
open(os.path.join(out, "cmd"), "w").write(str(os.getpid()))
while True:
    time.sleep(3600)
"""


def test_a_stop_signal_just_after_the_commands_exit_still_stops_its_group_gracefully(
    tmp_path: Path,
) -> None:
    # The command dies, and a SIGTERM for `run` comes before `run` has looked (it was busy:
    # here, stopped): nothing was forwarded, so its group must get the teardown's SIGTERM,
    # not wait out the grace for a SIGKILL.
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "20", "--", PY, "-c", _GROUP, str(tmp_path)))
        wait_for(lambda: (tmp_path / "child").exists() and (tmp_path / "cmd").exists())
        cmd = int((tmp_path / "cmd").read_text())
        stopped = False
        try:
            os.kill(proc.pid, signal.SIGSTOP)
            stopped = True
            os.kill(cmd, signal.SIGKILL)
            wait_for(lambda: state(cmd) == "Z", what="the command to die")
            os.kill(proc.pid, signal.SIGTERM)
        finally:
            if stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
        code, err = finish(proc)
    assert code == 128 + signal.SIGKILL, err
    assert (tmp_path / "term").read_text() == "TERM", err
    assert "sent SIGKILL" not in err
