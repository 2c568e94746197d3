"""POSIX shared-memory files (/dev/shm and other tmpfs dirs) and who holds them open or
mapped, read through the host door (live, snapshot or recording alike). A process whose
files could not be read is `unreadable`: then nothing may be called leaked, and no device
node called free (a reader without CAP_SYS_PTRACE cannot see other users' open files).
Which file leaked is a rule, not a reading: `accelhost.hygiene.judge.rules`.

Why by path and inode: a process maps `/dev/shm/psm_x` by name, but a file created under
one name and linked to another is held under the first: glibc's sem_open makes a
semaphore as `sem.XXXXXX`, maps it, links it to `sem.NAME` and unlinks the temporary name,
so its creator maps `/dev/shm/sem.XXXXXX (deleted)` for as long as it lives (a vLLM
Worker's `sem.mp-*` is held only that way). A `(deleted)` mapping or fd therefore names no
file, but its (device, inode) is kept: it is a listed file's exactly when that file is
this one under its other name (a mapped inode is never reused while mapped). A process in
another mount namespace shows its own /dev/shm under the same name: that can only make a
file look held (kept), never look free (removed).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass

from accelhost.host.base import FileStat, Host
from accelhost.parsers.procstat import parse_status_field
from accelhost.readers.procs import caps, list_pids, may_ptrace_all, open_fds, open_file_stat

_DELETED = " (deleted)"


@dataclass(frozen=True)
class ShmFile:
    path: str
    size_bytes: int  # apparent size (st_size), often sparse
    used_bytes: int  # st_blocks * 512: what the file really takes from the tmpfs
    uid: int
    owner: str
    mtime: float
    ctime: float
    dev: int = 0
    inode: int = 0
    birth: float | None = None  # creation time (statx), None where the kernel keeps none

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def age_s(self, now_epoch: float | None) -> float | None:
        return None if now_epoch is None else max(0.0, now_epoch - self.mtime)


def _shm_file(path: str, st: FileStat) -> ShmFile | None:
    """`st` as a shm file; None for what shm_open never makes (directories, links, ...)."""
    if st.kind != "file":
        return None
    used = st.blocks * 512
    return ShmFile(
        path, st.size, used, st.uid, st.owner, st.mtime, st.ctime, st.dev, st.inode, st.birth
    )


def list_shm_files(host: Host, dirs: Sequence[str]) -> dict[str, list[ShmFile] | None]:
    """dir -> its regular files (top level, like shm_open's names); None when unreadable."""
    out: dict[str, list[ShmFile] | None] = {}
    for directory in dirs:
        entries = host.stat_dir(directory)
        base = directory.rstrip("/")
        found = (_shm_file(f"{base}/{st.name}", st) for st in entries or ())
        out[directory] = None if entries is None else [f for f in found if f is not None]
    return out


def stat_shm_file(path: str, host: Host | None = None) -> ShmFile | None:
    """A fresh look at one file (live by default: the cleaner's and the supervisor's
    re-check); None when it is gone or no regular file."""
    if host is None:
        from accelhost.host.live import live_host

        host = live_host()
    st = host.stat(path)
    return None if st is None else _shm_file(path, st)


@dataclass(frozen=True)
class HeldScan:
    paths: frozenset[str]
    inodes: frozenset[tuple[int, int]]  # (st_dev, st_ino) of open or mapped files
    unreadable: tuple[int, ...]  # live pids whose fd/maps could not be read: may hold anything
    # PID 1 unreadable to a ptrace-all reader for its greater capabilities (a sandbox's or
    # VM's init): named in evidence, assumed to hold none (why: `held_by`).
    privileged: tuple[int, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.unreadable

    def holds(self, f: ShmFile) -> bool:
        """Some live process holds `f` open or maps it, by its path or by its identity."""
        return f.path in self.paths or bool(f.inode and (f.dev, f.inode) in self.inodes)


def _may_hold(status: str, pid: int) -> bool:
    """False for a process that holds nothing: a zombie, a kernel thread."""
    state = parse_status_field(status, "State") or ""
    return not state.startswith("Z") and parse_status_field(status, "PPid") != "2" and pid != 2


def parse_maps(text: str) -> tuple[set[str], set[tuple[int, int]]]:
    """Paths and (dev, inode) of file mappings in a /proc/PID/maps text; a `(deleted)`
    mapping gives its (dev, inode) only (see the module docstring)."""
    paths: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5]
        if not path.endswith(_DELETED):
            paths.add(path)
        major, _, minor = parts[3].partition(":")
        try:
            inode = int(parts[4])
            dev = os.makedev(int(major, 16), int(minor, 16))
        except ValueError:
            continue
        if inode:
            inodes.add((dev, inode))
    return paths, inodes


def _fd_paths(
    host: Host,
    pid: int,
    inodes: set[tuple[int, int]],
    devices: set[str],
    is_device: Callable[[str], bool] | None,
    listed: Container[str],
) -> set[str] | None:
    """Paths of a process's open files (as `held_by` says), and into `inodes` the identity
    of each open regular file: a process of another mount namespace (a pod's emptyDir at
    its /dev/shm) names by its own path a file we list under the host's path. A listed
    target is held by that path already (`holds`); a `(deleted)` one gives its identity
    only (see the module docstring); device nodes, deleted ones too, go into `devices`."""
    fds = open_fds(host, pid)
    if fds is None:
        return None
    out = set()
    for fd, target in fds.items():
        if not target.startswith("/"):
            continue  # sockets, pipes, anon_inode:...
        deleted = target.endswith(_DELETED)
        path = target.removesuffix(_DELETED)
        if is_device is not None and is_device(path):
            devices.add(path)
        if not deleted:
            out.add(target)
        if path.startswith(("/proc/", "/sys/", "/dev/", "/memfd:")) and not path.startswith(
            "/dev/shm/"
        ):
            continue  # pseudo files, device nodes and memfds: never a shm file
        if target in listed:
            continue
        st = open_file_stat(host, pid, fd)
        if st is not None and st.kind == "file":
            inodes.add((st.dev, st.inode))
    return out


@dataclass(frozen=True)
class ReaderRights:
    """What the reader itself may see: its capabilities, and whether it may ptrace all."""

    mine: int | None
    sees_all: bool

    @classmethod
    def of(cls, host: Host) -> ReaderRights:
        own = host.read_file("/proc/self/status")
        return cls(caps(own), may_ptrace_all(own))


@dataclass(frozen=True)
class PidHolds:
    """What one process holds open or maps (`paths`, `inodes`), or why that is unknown."""

    paths: frozenset[str]
    inodes: frozenset[tuple[int, int]]
    unreadable: bool = False
    privileged: bool = False
    devices: tuple[str, ...] = ()  # device nodes open (when `held_by` was given is_device)


def _lines_with(text: str, tokens: Sequence[str]) -> str:
    """The lines of `text` that contain one of `tokens` (found by substring search)."""
    out = []
    for token in tokens:
        at = text.find(token)
        while at >= 0:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end < 0 else end
            out.append(text[start:end])
            at = text.find(token, end)
    return "\n".join(out)


def held_by(
    host: Host,
    pid: int,
    rights: ReaderRights,
    maps_only: Sequence[str] = (),
    is_device: Callable[[str], bool] | None = None,
    listed: Container[str] = (),
) -> PidHolds:
    """One process's open and mapped files (the per-process step of `scan_held`).

    `maps_only`: keep only mappings whose /proc/PID/maps line contains one of these
    strings (a tmpfs's ` MAJ:MIN ` device, a shm dir's path): most processes map no shared
    memory, and one search of the text then spares parsing every library mapping.
    `is_device`: which open files are device nodes (`devices`), from the same fd walk;
    `listed`: the shm files' paths (an fd open on one needs no identity lookup)."""
    inodes: set[tuple[int, int]] = set()
    devices: set[str] = set()
    fd_paths = _fd_paths(host, pid, inodes, devices, is_device, listed)
    maps = host.read_file(f"/proc/{pid}/maps")
    unreadable = privileged = False
    if fd_paths is None or maps is None:
        # Anything that may hold files and could not be read: we cannot see it. Its
        # status is read now, not the /proc/PID/stat a doctor read earlier, so that a
        # process that exited in between is gone, not unreadable.
        status = host.read_file(f"/proc/{pid}/status")
        if status is None:
            # even its status closed to us (hidepid) while it is there: it may hold anything
            unreadable = host.stat(f"/proc/{pid}") is not None
        elif _may_hold(status, pid):
            theirs = caps(status)
            # Only PID 1, the init of a sandbox or VM that holds capabilities beyond a
            # reader that may ptrace anything (the kernel hides it even from root), is
            # assumed to hold none. Any other process may hold anything: a runtime's
            # default AppArmor profile closes every host process's fds and maps to a
            # DaemonSet holding CAP_SYS_PTRACE, and each of those has capabilities beyond
            # the DaemonSet's two; calling them holders of nothing would remove the files
            # of every live engine on the node.
            stronger = (
                pid == 1
                and rights.sees_all
                and rights.mine is not None
                and theirs is not None
                and bool(theirs & ~rights.mine)
            )
            privileged, unreadable = stronger, not stronger
    paths = fd_paths or set()
    if maps and maps_only:
        maps = _lines_with(maps, maps_only)
    if maps:
        mapped, nodes = parse_maps(maps)
        paths |= mapped
        inodes |= nodes
    return PidHolds(
        frozenset(paths), frozenset(inodes), unreadable, privileged, tuple(sorted(devices))
    )


def scan_held(host: Host, pids: Iterable[int] | None = None) -> HeldScan:
    """What every live process (or the given pids) holds open or maps, read once."""
    paths: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    unreadable: list[int] = []
    privileged: list[int] = []
    rights = ReaderRights.of(host)
    for pid in list_pids(host) if pids is None else pids:
        one = held_by(host, pid, rights)
        if one.unreadable:
            unreadable.append(pid)
        if one.privileged:
            privileged.append(pid)
        paths |= one.paths
        inodes |= one.inodes
    return HeldScan(
        frozenset(paths), frozenset(inodes), tuple(sorted(unreadable)), tuple(sorted(privileged))
    )


def held_paths(host: Host, pids: Iterable[int] | None = None) -> set[str]:
    """Every path a live process (or one of `pids`) holds open or maps right now (the
    library's call for it: docs/hygiene.md shows it)."""
    return set(scan_held(host, pids).paths)


def path_is_held(host: Host, path: str) -> bool | None:
    """One file, looked up fresh: True held, False free, None when some process is unreadable."""
    fresh = stat_shm_file(path, host)
    scan = scan_held(host)
    if path in scan.paths or (fresh is not None and scan.holds(fresh)):
        return True
    return None if not scan.complete else False
