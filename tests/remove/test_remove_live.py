"""accelhost.remove on this machine: real processes, real /dev/shm files, real segments.

Every process is started here and killed by pid in `finally`; files live in a directory
of our own under /dev/shm; segments are IPC_PRIVATE ones made here and removed by shmid.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelhost.host.live import LiveHost
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.procs import read_process
from accelhost.readers.shmfiles import ShmFile
from accelhost.readers.sysv import read_segments
from accelhost.remove.shm import remove_segment, unlink_shm_file
from accelhost.remove.signals import Pinned, signal_group, signal_members, signal_pinned_group

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (signals, /dev/shm)")

HOST = LiveHost()
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"


def _start(*argv: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(argv) or ["sleep", "1000"], **kw)  # type: ignore[call-overload]


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _ticks(pid: int) -> int:
    info = read_process(HOST, pid, cmdline=False)
    assert info is not None
    return info.start_ticks


def _exited(p: subprocess.Popen[bytes], timeout: float = 10.0) -> int | None:
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None


# ---- signals ------------------------------------------------------------------------------


def test_a_pinned_process_is_signalled_and_seen_to_go() -> None:
    proc = _start()
    pin = Pinned(HOST, proc.pid, _ticks(proc.pid))
    try:
        assert pin.alive and pin.fd is not None
        assert pin.send(signal.SIGTERM)
        assert _exited(proc) == -signal.SIGTERM
        assert not pin.alive
        assert not pin.send(signal.SIGKILL)  # gone: nothing is sent any more
    finally:
        pin.close()
        _stop(proc)


def test_a_pid_that_names_another_process_is_never_signalled() -> None:
    proc = _start()
    try:
        pin = Pinned(HOST, proc.pid, _ticks(proc.pid) + 1)  # planned: some earlier process
        assert not pin.alive and pin.fd is None
        assert not pin.send(signal.SIGKILL)
        assert proc.poll() is None
    finally:
        _stop(proc)


def test_without_pidfds_the_start_time_is_read_again_before_the_kill(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    victim, bystander = _start(), _start()
    try:
        right = Pinned(HOST, victim.pid, _ticks(victim.pid))
        wrong = Pinned(HOST, bystander.pid, _ticks(bystander.pid) + 3)
        assert right.fd is None and right.alive
        assert not wrong.alive and not wrong.send(signal.SIGKILL)
        assert right.send(signal.SIGKILL)
        assert _exited(victim) == -signal.SIGKILL
        assert bystander.poll() is None
    finally:
        _stop(victim, bystander)


def test_a_group_is_signalled_only_while_a_pinned_member_is_in_it() -> None:
    # A leader with two children, in a session (so a group) of its own.
    leader = _start("sh", "-c", "sleep 1000 & sleep 1000 & wait", start_new_session=True)
    try:
        time.sleep(0.2)
        pgid = leader.pid
        members = [Pinned(HOST, leader.pid, _ticks(leader.pid) + 1)]  # not the planned one
        assert signal_pinned_group(pgid, members, signal.SIGKILL) is None
        assert leader.poll() is None  # no pinned member alive in the group: nothing sent
        members = [Pinned(HOST, leader.pid, _ticks(leader.pid))]
        assert signal_pinned_group(pgid, members, signal.SIGKILL) is None
        assert _exited(leader) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group(pgid):
            time.sleep(0.05)
        assert _group(pgid) == []  # the children went with it
        for m in members:
            m.close()
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, signal.SIGKILL)
        _stop(leader)


def _group(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = read_process(HOST, int(name), cmdline=False)
            if info is not None and info.pgid == pgid and not info.is_zombie:
                out.append(info.pid)
    return out


def test_signal_group_reports_a_missing_group_as_an_error() -> None:
    proc = _start()
    pgid = proc.pid
    _stop(proc)  # reaped: the group is gone
    assert isinstance(signal_group(pgid, 0), ProcessLookupError)


def test_signal_members_kills_each_listed_pid() -> None:
    a, b = _start(sys.executable, "-c", STUBBORN), _start(sys.executable, "-c", STUBBORN)
    try:
        signal_members([a.pid, b.pid], signal.SIGKILL)
        assert _exited(a) == -signal.SIGKILL and _exited(b) == -signal.SIGKILL
    finally:
        _stop(a, b)


# ---- /dev/shm files -----------------------------------------------------------------------


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    d = Path(tempfile.mkdtemp(prefix="accelhost-remove-test-", dir="/dev/shm"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _made(path: Path) -> tuple[int, int]:
    path.write_bytes(b"x" * 8192)
    st = os.stat(path)
    return st.st_dev, st.st_ino


def test_a_free_file_is_announced_then_unlinked(shm_dir: Path) -> None:
    path = shm_dir / "psm_free"
    dev, ino = _made(path)
    seen: list[tuple[bool, str]] = []

    def announce(fresh: ShmFile, why: str) -> None:
        seen.append((path.exists(), why))  # still there when the journal line is written

    done = unlink_shm_file(HOST, str(path), dev, ino, lambda f: (True, "leaked"), announce)
    assert (done.status, done.result, done.tried) == ("removed", "removed", True)
    assert done.freed_bytes >= 8192
    assert seen == [(True, "leaked")]
    assert not path.exists()
    again = unlink_shm_file(HOST, str(path), dev, ino)
    assert (again.status, again.result, again.tried) == ("gone", "already gone", False)


def test_a_held_file_stays(shm_dir: Path) -> None:
    path = shm_dir / "psm_held"
    dev, ino = _made(path)
    with open(path, "rb") as fh:
        holder = _start("sleep", "1000", stdin=fh)
    try:
        done = unlink_shm_file(HOST, str(path), dev, ino, announce=_never)
        assert done.status == "held" and done.result.startswith("kept: a live process")
        assert path.exists()
    finally:
        _stop(holder)


def test_a_name_given_to_another_file_or_kept_by_the_rule_stays(shm_dir: Path) -> None:
    path = shm_dir / "psm_renamed"
    dev, ino = _made(path)
    path.unlink()
    _made(path)  # the same name, another file (most likely another inode)
    if os.stat(path).st_ino == ino:
        pytest.skip("the tmpfs gave the new file the same inode")
    done = unlink_shm_file(HOST, str(path), dev, ino, announce=_never)
    assert done.status == "replaced" and path.exists()
    dev, ino = os.stat(path).st_dev, os.stat(path).st_ino
    kept = unlink_shm_file(HOST, str(path), dev, ino, lambda f: (False, "too young"), _never)
    assert (kept.status, kept.result) == ("kept", "kept: too young") and path.exists()


def test_a_name_made_again_while_it_was_judged_stays(shm_dir: Path) -> None:
    """Between the judgement and the unlink lies the whole holder scan: an engine that
    restarts under a fixed name may unlink the old file and make a new one meanwhile. The
    new one (not held yet) is not removed on the old one's judgement."""
    path = shm_dir / "psm_fixed"
    dev, ino = _made(path)

    def restart(fresh: ShmFile, why: str) -> None:  # runs after the holder scan
        new = shm_dir / "psm_fixed.new"
        new.write_bytes(b"y" * 4096)  # made while the old file lives: another inode
        os.replace(new, path)

    done = unlink_shm_file(HOST, str(path), dev, ino, lambda f: (True, "leaked"), restart)
    assert (done.status, done.tried) == ("replaced", True)
    assert path.read_bytes() == b"y" * 4096


def _never(*_args: object) -> None:
    raise AssertionError("announced a removal that must not happen")


# ---- System V segments --------------------------------------------------------------------


@pytest.fixture
def segment() -> Iterator[int]:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
    libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    shmid = int(libc.shmget(0, 4096, 0o1000 | 0o600))  # IPC_PRIVATE, IPC_CREAT | 0600
    if shmid < 0:
        pytest.skip(f"shmget: {os.strerror(ctypes.get_errno())}")
    try:
        yield shmid
    finally:
        libc.shmctl(shmid, 0, None)  # IPC_RMID by id; EINVAL when the test removed it


def _exists(shmid: int) -> bool:
    return any(s.shmid == shmid for s in read_segments(HOST) or [])


def test_a_segment_the_rule_keeps_stays(segment: int) -> None:
    done = remove_segment(HOST, segment, lambda s: (False, f"creator {s.cpid} is alive"), _never)
    assert done.status == "kept" and done.result == f"kept: creator {os.getpid()} is alive"
    assert _exists(segment)


def test_a_segment_the_rule_lets_go_is_announced_then_removed(segment: int) -> None:
    seen: list[tuple[int, bool]] = []

    def announce(seg: ShmSegment, why: str) -> None:
        seen.append((seg.size, _exists(segment)))

    done = remove_segment(HOST, segment, lambda s: (s.nattch == 0, "unattached"), announce)
    assert (done.status, done.result, done.tried, done.freed_bytes) == (
        "removed",
        "removed",
        True,
        4096,
    )
    assert seen == [(4096, True)]
    assert not _exists(segment)
    assert remove_segment(HOST, segment).status == "gone"


def test_a_refused_removal_is_reported_as_failed(segment: int) -> None:
    def refuse(shmid: int) -> None:
        raise PermissionError(errno.EPERM, f"shmctl({shmid}, IPC_RMID): Operation not permitted")

    done = remove_segment(HOST, segment, rmid=refuse)
    assert done.status == "failed" and done.tried and not done.ok
    assert "not permitted" in done.result and _exists(segment)
