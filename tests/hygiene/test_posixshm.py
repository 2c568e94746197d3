"""POSIX shared memory: the held-paths reader and the leak rule, with real files and processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hygiene_lab import stop_popen

from accelhost.host.live import LiveHost
from accelhost.hygiene.judge.rules import (
    judge_shm_file,
    leaked_posix_shm,
    match_naming,
)
from accelhost.readers.shmfiles import (
    HeldScan,
    ShmFile,
    held_paths,
    list_shm_files,
    parse_maps,
    path_is_held,
    scan_held,
    stat_shm_file,
)

SHM = Path("/dev/shm")


# open: keep an fd; map: mmap then close the fd; map-unlink: mmap, close, unlink the name.
HOLDER = r"""
import mmap, os, sys, time
mode, path = sys.argv[1], sys.argv[2]
fd = os.open(path, os.O_RDWR)
if mode != "open":
    m = mmap.mmap(fd, 4096)
    os.close(fd)
    if mode == "map-unlink":
        os.unlink(path)
print("ready", flush=True)
time.sleep(1000)
"""
# glibc's sem_open, as Python's multiprocessing (and so vLLM) calls it: the semaphore is
# made as a temporary file, mapped, linked to /dev/shm/sem.NAME, its temporary name unlinked.
SEM_HOLDER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.sem_open.restype = ctypes.c_void_p
sem = libc.sem_open(sys.argv[1].encode(), os.O_CREAT | os.O_EXCL, 0o600, 1)
assert sem not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
print("ready", flush=True)
time.sleep(1000)
"""


@pytest.fixture
def shm_paths() -> Iterator[list[Path]]:
    """Unique names under /dev/shm; each removed by path afterwards."""
    if not SHM.is_dir():
        pytest.skip("no /dev/shm")
    made: list[Path] = []
    try:
        yield made
    finally:
        for p in made:
            p.unlink(missing_ok=True)


@pytest.fixture
def private() -> Iterator[list[Path]]:
    """Two directories of our own on the /dev/shm tmpfs, removed whole afterwards: other
    software's files on the shared /dev/shm cannot interfere."""
    import shutil
    import tempfile

    if not SHM.is_dir():
        pytest.skip("no /dev/shm")
    dirs = [Path(tempfile.mkdtemp(prefix="accelhost-test-", dir=SHM)) for _ in range(2)]
    try:
        yield dirs
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


def _new_file(
    made: list[Path],
    prefix: str = "psm_",
    size: int = 8192,
    write: int = 4096,
    where: Path = SHM,
) -> Path:
    path = where / f"{prefix}accelhost-test-{uuid.uuid4().hex[:10]}"
    made.append(path)
    with open(path, "wb") as fh:
        fh.truncate(size)
        fh.write(b"x" * write)
    return path


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for p in procs:
            stop_popen(p)


def _hold(procs: list[subprocess.Popen[str]], mode: str, path: Path) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, mode, str(path)], stdout=subprocess.PIPE, text=True
    )
    procs.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    return proc.pid


def _age(path: Path, seconds: float) -> None:
    past = time.time() - seconds
    os.utime(path, (past, past))


def test_parse_maps_keeps_files_the_identity_of_deleted_ones_and_drops_pseudo() -> None:
    text = (
        "7f00-7f10 rw-s 00000000 00:1a 12345 /dev/shm/psm_abc\n"
        "7f10-7f20 rw-s 00000000 00:1a 12346 /dev/shm/sem.xyz (deleted)\n"
        "7f20-7f30 r-xp 00000000 08:01 999 /usr/lib/with space.so\n"
        "7f30-7f40 rw-p 00000000 00:00 0 [heap]\n"
        "7f40-7f50 rw-p 00000000 00:00 0\n"
    )
    paths, inodes = parse_maps(text)
    assert paths == {"/dev/shm/psm_abc", "/usr/lib/with space.so"}
    # a deleted name is no file, but its inode may be a listed file's under its other name
    assert {(os.makedev(0, 0x1A), 12345), (os.makedev(0, 0x1A), 12346)} <= inodes
    assert all(ino != 0 for _, ino in inodes)


def test_a_recorded_listing_keeps_blocks_owner_identity_and_skips_dirs() -> None:
    from accelhost.host.base import FileStat
    from fakehost import FakeMachine

    machine = FakeMachine(
        stat_dirs={
            "/dev/shm/": [
                FileStat("psm_1a2b", "file", 160000000, 4096, 0, "root", 1.7e9, 1.7e9, 26, 77),
                FileStat("somedir", "dir", 40, 0, 0, "root", 1.7e9, 1.7e9, 26, 78),
                FileStat("ln", "link", 8, 0, 0, "root", 1.7e9, 1.7e9, 26, 80),
                FileStat("name with space", "file", 32, 8, 1000, "alice", 2.0, 2.0, 26, 79, 1.5),
            ]
        }
    )
    files = list_shm_files(machine.host(), ["/dev/shm/"])["/dev/shm/"] or []
    assert [f.path for f in files] == ["/dev/shm/psm_1a2b", "/dev/shm/name with space"]
    assert files[0].used_bytes == 4096 * 512 and files[0].size_bytes == 160000000
    assert (files[1].owner, files[1].uid, files[1].inode) == ("alice", 1000, 79)
    assert (files[0].birth, files[1].birth) == (None, 1.5)


def test_held_paths_sees_open_and_mapped_files_but_not_deleted_mappings(
    shm_paths: list[Path], holders: list[subprocess.Popen[str]]
) -> None:
    opened, mapped, unlinked, free = (_new_file(shm_paths) for _ in range(4))
    _hold(holders, "open", opened)
    _hold(holders, "map", mapped)
    _hold(holders, "map-unlink", unlinked)
    held = held_paths(LiveHost())
    assert str(opened) in held
    assert str(mapped) in held
    assert str(free) not in held
    assert not any(p.startswith(str(unlinked)) for p in held)
    assert path_is_held(LiveHost(), str(mapped)) is True
    assert path_is_held(LiveHost(), str(free)) is False


def test_held_paths_limited_to_given_pids(
    shm_paths: list[Path], holders: list[subprocess.Popen[str]]
) -> None:
    a, b = _new_file(shm_paths), _new_file(shm_paths)
    pid_a = _hold(holders, "open", a)
    _hold(holders, "map", b)
    held = held_paths(LiveHost(), [pid_a])
    assert str(a) in held and str(b) not in held


def test_old_held_file_is_never_leaked_and_old_free_one_is(
    shm_paths: list[Path], holders: list[subprocess.Popen[str]], private: list[Path]
) -> None:
    held_file = _new_file(shm_paths, where=private[0])
    free_file = _new_file(shm_paths, size=10 * 1024 * 1024, write=4096, where=private[1])
    _hold(holders, "map", held_file)
    for p in (held_file, free_file):
        _age(p, 86400 * 30)
    naming = [("vLLM", "psm_*")]
    dirs = [str(d) for d in private]
    leaked = {v.file.path: v for v in leaked_posix_shm(dirs, 60.0, namings=naming)}
    assert str(held_file) not in leaked
    verdict = leaked[str(free_file)]
    assert verdict.naming == "vLLM"
    # bytes actually used, not the 10 MiB apparent size of the sparse file
    assert verdict.file.size_bytes == 10 * 1024 * 1024
    assert 4096 <= verdict.file.used_bytes < 1024 * 1024
    assert verdict.file.owner == "root"


def test_young_free_file_waits_for_min_age(shm_paths: list[Path], private: list[Path]) -> None:
    young = _new_file(shm_paths, where=private[0])
    dirs = [str(private[0])]
    assert str(young) not in {v.file.path for v in leaked_posix_shm(dirs, 3600.0)}
    _age(young, 7200)
    assert str(young) in {v.file.path for v in leaked_posix_shm(dirs, 3600.0)}


def test_a_semaphore_mapped_under_its_temporary_name_is_held(
    holders: list[subprocess.Popen[str]],
) -> None:
    """sem_open maps a semaphore before it links it to its name: its creator maps
    `sem.XXXXXX (deleted)` for as long as it lives (a vLLM Worker holds its `sem.mp-*`
    only so). Held by its inode while the creator lives; leaked once it is gone."""
    name = f"accelhost-test-{uuid.uuid4().hex[:10]}"
    path = SHM / f"sem.{name}"
    proc = subprocess.Popen(
        [sys.executable, "-c", SEM_HOLDER, f"/{name}"], stdout=subprocess.PIPE, text=True
    )
    holders.append(proc)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        maps = Path(f"/proc/{proc.pid}/maps").read_text()
        assert str(path) not in maps and "/dev/shm/sem." in maps  # its temporary name
        assert str(path) not in held_paths(LiveHost())
        _age(path, 7200)
        (listed,) = [
            f for f in list_shm_files(LiveHost(), [str(SHM)])[str(SHM)] or [] if f.path == str(path)
        ]
        verdict = judge_shm_file(listed, scan_held(LiveHost()), time.time(), 60.0, None)
        assert not verdict.leaked and "held" in verdict.reason
        assert path_is_held(LiveHost(), str(path)) is True
        stop_popen(proc)
        gone = judge_shm_file(listed, scan_held(LiveHost()), time.time(), 60.0, None)
        assert gone.abandoned and gone.unclaimed and not gone.leaked, gone.reason
        named = judge_shm_file(listed, scan_held(LiveHost()), time.time(), 60.0, "vLLM")
        assert named.leaked and not named.unclaimed, named.reason
    finally:
        path.unlink(missing_ok=True)


def test_unreadable_process_blocks_the_verdict() -> None:
    f = ShmFile("/dev/shm/psm_x", 10, 4096, 0, "root", 0.0, 0.0)
    scan = HeldScan(frozenset(), frozenset(), unreadable=(4242,))
    verdict = judge_shm_file(f, scan, 1e9, 60.0, None)
    assert not verdict.leaked and "4242" in verdict.reason
    by_inode = HeldScan(frozenset(), frozenset({(5, 9)}), ())
    g = ShmFile("/dev/shm/renamed", 10, 4096, 0, "root", 0.0, 0.0, dev=5, inode=9)
    assert not judge_shm_file(g, by_inode, 1e9, 60.0, None).leaked


def test_list_shm_files_names_unreadable_dirs(tmp_path: Path) -> None:
    (tmp_path / "sem.mp-abc").write_bytes(b"x" * 32)
    (tmp_path / "sub").mkdir()
    listing = list_shm_files(LiveHost(), [str(tmp_path), str(tmp_path / "missing")])
    assert [f.name for f in listing[str(tmp_path)] or []] == ["sem.mp-abc"]
    assert listing[str(tmp_path / "missing")] is None
    assert match_naming("sem.mp-abc", [("vLLM", "psm_*"), ("vLLM", "sem.mp-*")]) == "vLLM"
    assert match_naming("other", [("vLLM", "psm_*")]) is None


def test_listing_needs_no_gnu_find(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """busybox (Alpine) has a `find` without -printf and a `stat` without %W: the files are
    still listed, with their size, blocks, owner, identity and birth time (statx)."""
    from fakehost import fake_tools

    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "psm_a").write_bytes(b"x" * 5000)
    (shm / "sub").mkdir()
    os.symlink(shm / "psm_a", shm / "link")
    log = fake_tools(tmp_path / "bin", {}, tools=["find", "stat"])  # every call fails
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/bin:/usr/bin")
    listing = list_shm_files(LiveHost(), [str(shm)])[str(shm)]
    assert listing is not None and [f.name for f in listing] == ["psm_a"]
    st = os.stat(shm / "psm_a")
    (f,) = listing
    assert (f.size_bytes, f.used_bytes, f.uid) == (5000, st.st_blocks * 512, st.st_uid)
    assert (f.dev, f.inode, f.mtime) == (st.st_dev, st.st_ino, st.st_mtime)
    assert f.birth is not None and abs(f.birth - st.st_ctime) < 5  # tmpfs keeps it
    assert log.calls() == {}  # neither tool was asked


def test_recorded_listing_replays_what_was_read(tmp_path: Path) -> None:
    """A recording keeps what the kernel said of each file (no tool's output): the
    replayed listing equals the live one, birth times included."""
    import json

    from accelhost.host.redact import recorder
    from accelhost.host.snapshot import SnapshotHost

    (tmp_path / "sem.mp-x y").write_bytes(b"x" * 32)  # a space in the name
    (tmp_path / "psm_b").write_bytes(b"")
    rec = recorder(LiveHost())
    live = list_shm_files(rec, [str(tmp_path)])[str(tmp_path)] or []
    snap = json.loads(json.dumps(rec.to_snapshot()))  # through JSON, as a file would
    replayed = list_shm_files(SnapshotHost(snap), [str(tmp_path)])[str(tmp_path)]
    assert [f.name for f in live] == ["psm_b", "sem.mp-x y"]
    assert replayed == live
    assert all(f.birth is not None for f in live)  # recorded and replayed too
    assert not snap["commands"]  # no tool ran, none was made up


def test_a_fresh_look_at_one_file_is_the_listed_file(tmp_path: Path) -> None:
    (tmp_path / "psm_a").write_bytes(b"x" * 100)
    (tmp_path / "sub").mkdir()
    (listed,) = list_shm_files(LiveHost(), [str(tmp_path)])[str(tmp_path)] or []
    fresh = stat_shm_file(str(tmp_path / "psm_a"))
    # its birth is asked apart (LiveHost.birth_time): only an unheld file's is ever needed
    assert fresh is not None and replace(fresh, birth=listed.birth) == listed
    assert LiveHost().birth_time(listed.path) == listed.birth
    assert stat_shm_file(str(tmp_path / "sub")) is None  # no regular file
    assert stat_shm_file(str(tmp_path / "gone")) is None


def test_an_open_file_is_held_by_its_identity_on_a_replay(
    shm_paths: list[Path], holders: list[subprocess.Popen[str]], private: list[Path]
) -> None:
    """The identity of an open file (`stat` of /proc/PID/fd/N) is recorded, so a replay
    sees, as the live host did, that a file listed under another path is held."""
    from accelhost.host.redact import recorder
    from accelhost.host.snapshot import SnapshotHost

    opened = _new_file(shm_paths, where=private[0])
    other = private[1] / opened.name
    os.link(opened, other)
    shm_paths.append(other)
    pid = _hold(holders, "open", opened)
    rec = recorder(LiveHost())
    live = scan_held(rec, [pid])
    (listed,) = list_shm_files(rec, [str(private[1])])[str(private[1])] or []
    replayed = scan_held(SnapshotHost(rec.to_snapshot()), [pid])
    assert live.holds(listed) and replayed.holds(listed)
    assert str(other) not in replayed.paths  # held by identity, not by name


def test_scan_reports_processes_it_cannot_read(tmp_path: Path) -> None:
    scan = scan_held(LiveHost())
    # every unreadable pid is a live, non-kernel process we really could not read
    for pid in scan.unreadable + scan.privileged:
        assert Path(f"/proc/{pid}").exists()
        with pytest.raises(PermissionError):
            Path(f"/proc/{pid}/maps").read_text()


def test_snapshot_keeps_only_shared_mappings_and_replays_the_verdict(
    shm_paths: list[Path], holders: list[subprocess.Popen[str]], private: list[Path]
) -> None:
    from accelhost.host.redact import recorder
    from accelhost.host.snapshot import SnapshotHost
    from accelhost.hygiene import HygieneOptions, read_facts, run_checks

    held, free = _new_file(shm_paths, where=private[0]), _new_file(shm_paths, where=private[1])
    pid = _hold(holders, "map", held)
    for p in (held, free):
        _age(p, 7200)
    rec = recorder(LiveHost())
    opts = HygieneOptions(shm_dirs=tuple(str(d) for d in private))
    live = run_checks(read_facts(rec, opts), opts, ("posix_shm",)).checks[0]
    snap = rec.to_snapshot()
    maps = snap["files"][f"/proc/{pid}/maps"]
    assert str(held) in maps and ".so" not in maps and "[heap]" not in maps
    again = run_checks(read_facts(SnapshotHost(snap), opts), opts, ("posix_shm",)).checks[0]
    replayed = again.to_dict()
    assert (
        replayed.pop("fix")
        == f"on the recorded host: {live.fix}; a --snapshot replay cannot be cleaned"
    )
    assert replayed == {k: v for k, v in live.to_dict().items() if k != "fix"}
    paths = {e["path"] for e in again.evidence}
    assert str(free) in paths and str(held) not in paths


def _shm_fake(readable: bool):  # type: ignore[no-untyped-def]
    """A recorded host with two old files in /dev/shm, one mapped by pid 50."""
    from hygiene_fakes import NOW, FakeHost

    fake = FakeHost()
    fake.proc(50, "VLLM::EngineCore", ppid=1, pgid=50, sid=50)
    old = NOW - 7200
    fake.shm_file("psm_held", 160000000, 8192, old, 77)
    fake.shm_file("psm_left", 160000000, 8192, old, 78)
    fake.files["/proc/50/maps"] = "7f00-7f10 rw-s 00000000 00:1a 77 /dev/shm/psm_held\n"
    if not readable:
        del fake.files["/proc/1/maps"]  # pid 1's mappings closed to the reader
    for pid in (1, 50, 900):
        fake.dirs.setdefault(f"/proc/{pid}/fd", [])
    return fake


def test_posix_shm_check_on_a_recording_and_when_it_cannot_tell() -> None:
    from accelhost.hygiene import HygieneOptions, read_facts, run_checks

    opts = HygieneOptions()
    ok = run_checks(read_facts(_shm_fake(True).host(), opts), opts, ("posix_shm",)).checks[0]
    assert ok.status == "WARN"
    assert [e["path"] for e in ok.evidence] == ["/dev/shm/psm_left"]
    assert ok.evidence[0]["used_bytes"] == 8192 * 512 and ok.evidence[0]["age_s"] == 7200
    # pid 1's open files cannot be read (and it is no more privileged than us): unknown
    blind = run_checks(read_facts(_shm_fake(False).host(), opts), opts, ("posix_shm",))
    assert blind.checks[0].status == "UNKNOWN" and blind.exit_code == 2
    assert "pid(s) 1" in blind.checks[0].summary


def test_an_open_file_seen_under_another_path_is_held(
    shm_paths: list[Path], holders: list[subprocess.Popen[str]], private: list[Path]
) -> None:
    """A pod's process names its emptyDir file /dev/shm/x; the host lists it elsewhere. A
    hard link stands in for that: one file, two paths; the process opens one, we list the
    other. Its identity (device, inode) says it is held."""
    opened = _new_file(shm_paths, where=private[0])
    other = private[1] / opened.name
    os.link(opened, other)
    shm_paths.append(other)
    _hold(holders, "open", opened)  # an open fd, no mapping
    _age(other, 7200)
    assert str(other) not in held_paths(LiveHost())
    assert str(other) not in {v.file.path for v in leaked_posix_shm([str(private[1])], 60.0)}
    assert path_is_held(LiveHost(), str(other)) is True


def test_a_process_gone_during_the_look_is_not_unreadable() -> None:
    """The doctor reads /proc/PID/stat first and the open files later; a process that
    exits in between (its status gone too) holds nothing: the verdict stays possible."""
    from accelhost.hygiene import HygieneOptions, read_facts, run_checks

    fake = _shm_fake(True)
    fake.proc(77, "python3 short_lived.py", ppid=1, pgid=77)
    del fake.files["/proc/77/status"]  # it exited after its stat was read
    opts = HygieneOptions()
    facts = read_facts(fake.host(), opts)
    assert facts.processes is not None and 77 in facts.processes
    check = run_checks(facts, opts, ("posix_shm",)).checks[0]
    assert check.status == "WARN" and [e["path"] for e in check.evidence] == ["/dev/shm/psm_left"]


def test_only_pid_1_unreadable_with_more_capabilities_is_assumed_to_hold_nothing() -> None:
    """A sandbox's init (PID 1, capabilities beyond root's) hides its files even from root:
    assumed to hold none. Any other unreadable process may hold anything, however strong:
    under a runtime's default AppArmor profile a DaemonSet with CAP_SYS_PTRACE cannot read
    any host process's fds or maps, and each holds capabilities beyond its two; calling
    them holders of nothing made every live engine's files look leaked. A process whose
    very status is closed to the reader (hidepid) while /proc lists it is unreadable too."""
    from accelhost.host.base import FileStat
    from accelhost.readers.shmfiles import ReaderRights, held_by
    from fakehost import FakeMachine

    full = "CapPrm:\t000001ffffffffff\n"
    machine = FakeMachine(
        files={
            "/proc/1/status": f"Name:\tinit\nState:\tS\nPPid:\t0\n{full}",
            "/proc/50/status": f"Name:\tvllm\nState:\tS\nPPid:\t1\n{full}",
            "/proc/self/status": "CapPrm:\t0000000000080004\nCapEff:\t0000000000080004\n",
        },
        dirs={"/proc": ["1", "50", "60", "70"]},
        stats={"/proc/60": FileStat("60", "dir", 0, 0, 0, "root", 0.0, 0.0, 1, 60)},
    )
    host = machine.host()
    rights = ReaderRights.of(host)  # CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH only
    assert rights.sees_all and rights.mine == 0x80004
    init, engine, hidden, gone = (held_by(host, pid, rights) for pid in (1, 50, 60, 70))
    assert (init.privileged, init.unreadable) == (True, False)
    assert (engine.privileged, engine.unreadable) == (False, True)
    assert hidden.unreadable and not (gone.unreadable or gone.privileged)
    scan = scan_held(host)
    assert (scan.unreadable, scan.privileged, scan.complete) == ((50, 60), (1,), False)
    old = ShmFile("/dev/shm/psm_x", 4096, 4096, 0, "root", 0.0, 0.0, 1, 7)
    verdict = judge_shm_file(old, scan, 7200.0, 60.0, "vLLM")
    assert verdict.blocked and not verdict.leaked
