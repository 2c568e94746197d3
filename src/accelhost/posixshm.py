"""POSIX shared memory (/dev/shm and other tmpfs dirs): which files are held, which leaked.

Reusable entry points (the doctor, the cleaner and the supervisor share them):

- `held_paths(host, pids=None) -> set[str]`: every path some live process holds open
  (/proc/PID/fd) or maps (/proc/PID/maps); `(deleted)` entries are no files and are left out.
- `scan_held(host, pids=None) -> HeldScan`: the same plus the (device, inode) pairs of
  mappings and the pids whose files could not be read (then nothing may be called leaked).
- `list_shm_files(host, dirs)` (from `accelhost.shmlisting`, where a live directory is
  read with os calls, busybox images too) and `leaked_posix_shm(dirs, min_age_s, host=None)`;
  a snapshot replays the listing it recorded.
- `path_is_held(host, path)`: the re-check just before one unlink.

Why by path and inode: a process maps `/dev/shm/psm_x` by name; an unlinked one shows
`(deleted)`. A process in another mount namespace shows its own /dev/shm under the same
name: that can only make a file look held (kept), never look free (removed).
Reads go through the host door (live, snapshot or recording) so the doctor replays them;
the live directory listing is handed to a recording host as the `find` listing it records.
"""

from __future__ import annotations

import fnmatch
import os
import stat as stat_mod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accelhost.host.base import Host
from accelhost.parsers.procstat import parse_status_field
from accelhost.procs import list_pids
from accelhost.shmlisting import (
    FIND_FORMAT,
    ShmFile,
    birth_argv,
    find_argv,
    list_shm_files,
    parse_birth_times,
    parse_find_listing,
    read_shm_dir,
    render_listing,
    stat_shm_file,
)

__all__ = [  # the listing's names too: callers import them from here
    "FIND_FORMAT",
    "HeldScan",
    "ShmFile",
    "ShmVerdict",
    "birth_argv",
    "find_argv",
    "held_births",
    "held_paths",
    "is_held",
    "judge_shm_file",
    "keep_shared_maps",
    "leaked_posix_shm",
    "list_shm_files",
    "match_naming",
    "parse_birth_times",
    "parse_find_listing",
    "parse_maps",
    "path_is_held",
    "read_shm_dir",
    "render_listing",
    "scan_held",
    "stat_shm_file",
]

DEFAULT_SHM_DIRS: tuple[str, ...] = ("/dev/shm",)
_DELETED = " (deleted)"


@dataclass(frozen=True)
class HeldScan:
    paths: frozenset[str]
    inodes: frozenset[tuple[int, int]]  # (st_dev, st_ino) of mapped files
    unreadable: tuple[int, ...]  # live pids whose fd/maps could not be read: may hold anything
    # Unreadable only because they hold capabilities the reader lacks (a sandbox's or VM's
    # init): the kernel hides them even from root. Named in evidence, assumed to hold none.
    privileged: tuple[int, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.unreadable


def _cap_prm(status: str | None) -> int | None:
    """The permitted capabilities in a /proc/PID/status text."""
    value = parse_status_field(status or "", "CapPrm")
    try:
        return None if value is None else int(value, 16)
    except ValueError:
        return None


def _may_hold(status: str | None, pid: int) -> bool:
    """False for a process that holds nothing: gone (no status), a zombie, a kernel thread."""
    if status is None:
        return False
    state = parse_status_field(status, "State") or ""
    return not state.startswith("Z") and parse_status_field(status, "PPid") != "2" and pid != 2


def parse_maps(text: str) -> tuple[set[str], set[tuple[int, int]]]:
    """Paths and (dev, inode) of file mappings in a /proc/PID/maps text; no deleted ones."""
    paths: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith("/"):
            continue
        path = parts[5]
        if path.endswith(_DELETED):
            continue
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


def keep_shared_maps(text: str) -> str:
    """What a snapshot keeps of a /proc/PID/maps: shared file mappings (`rw-s`), the only
    kind a shm_open file is mapped as; libraries and heaps stay out of bug reports."""
    keep = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[1].endswith("s") and parts[5].startswith("/"):
            keep.append(line)
    return "".join(f"{line}\n" for line in keep)


def _fd_paths(host: Host, pid: int, inodes: set[tuple[int, int]] | None = None) -> set[str] | None:
    """Paths of a process's open files. With `inodes` (live hosts only), also the identity
    of each open regular file: a process of another mount namespace (a pod's emptyDir at
    its /dev/shm) names by its own path a file we list under the host's path."""
    fds = host.list_dir(f"/proc/{pid}/fd")
    if fds is None:
        return None
    out = set()
    for fd in fds:
        target = host.read_link(f"/proc/{pid}/fd/{fd}")
        if target and target.startswith("/") and not target.endswith(_DELETED):
            out.add(target)
            elsewhere = target.startswith(("/proc/", "/sys/", "/dev/"))
            if inodes is not None and (not elsewhere or target.startswith("/dev/shm/")):
                try:
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if stat_mod.S_ISREG(st.st_mode):
                    inodes.add((st.st_dev, st.st_ino))
    return out


def scan_held(host: Host, pids: Iterable[int] | None = None) -> HeldScan:
    """What every live process (or the given pids) holds open or maps, read once."""
    paths: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    unreadable: list[int] = []
    privileged: list[int] = []
    mine = _cap_prm(host.read_file("/proc/self/status"))
    for pid in list_pids(host) if pids is None else pids:
        fd_paths = _fd_paths(host, pid, inodes if host.is_live else None)
        maps = host.read_file(f"/proc/{pid}/maps")
        if fd_paths is None or maps is None:
            # Anything that may hold files and could not be read: we cannot see it. Its
            # status is read now, not the /proc/PID/stat a doctor read earlier, so that a
            # process that exited in between is gone, not unreadable.
            status = host.read_file(f"/proc/{pid}/status")
            if _may_hold(status, pid):
                theirs = _cap_prm(status)
                stronger = mine is not None and theirs is not None and bool(theirs & ~mine)
                (privileged if stronger else unreadable).append(pid)
        paths |= fd_paths or set()
        if maps:
            mapped, nodes = parse_maps(maps)
            paths |= mapped
            inodes |= nodes
    return HeldScan(
        frozenset(paths), frozenset(inodes), tuple(sorted(unreadable)), tuple(sorted(privileged))
    )


def held_paths(host: Host, pids: Iterable[int] | None = None) -> set[str]:
    """Every path a live process (or one of `pids`) holds open or maps right now."""
    return set(scan_held(host, pids).paths)


def path_is_held(host: Host, path: str) -> bool | None:
    """One file, looked up fresh: True held, False free, None when some process is unreadable."""
    fresh = stat_shm_file(path)
    scan = scan_held(host)
    if path in scan.paths or (fresh is not None and (fresh.dev, fresh.inode) in scan.inodes):
        return True
    return None if not scan.complete else False


@dataclass(frozen=True)
class ShmVerdict:
    file: ShmFile
    leaked: bool
    reason: str
    naming: str | None  # which engine's naming the name matches (None: no known naming)
    blocked: bool = False  # could not tell: some live process's open files were unreadable


# vLLM makes its message queues (psm_*) and their semaphores (sem.mp-*) at the same
# moment; while it serves, its resource tracker keeps such a semaphore's name, which no
# process holds open or mapped. A file born this close to one a live process holds is
# that live process's sibling, not a leak (a false "sibling" only ever keeps a file).
SIBLING_WINDOW_S = 2.0


def is_held(f: ShmFile, scan: HeldScan) -> bool:
    return f.path in scan.paths or bool(f.inode and (f.dev, f.inode) in scan.inodes)


def held_births(files: Sequence[ShmFile], scan: HeldScan) -> list[float]:
    """Birth times of the files some live process holds (siblings are judged by them)."""
    return [f.birth for f in files if f.birth is not None and is_held(f, scan)]


def judge_shm_file(
    f: ShmFile,
    scan: HeldScan,
    now_epoch: float | None,
    min_age_s: float,
    naming: str | None,
    sibling_births: Sequence[float] = (),
) -> ShmVerdict:
    """The POSIX leak rule: held by no live process, no sibling of a held file (born within
    SIBLING_WINDOW_S of one), and unchanged for `min_age_s`."""
    if is_held(f, scan):
        return ShmVerdict(f, False, "held open or mapped by a live process", naming)
    if f.birth is not None and any(abs(f.birth - b) <= SIBLING_WINDOW_S for b in sibling_births):
        return ShmVerdict(f, False, "born with a file a live process holds: that process's", naming)
    if not scan.complete:
        shown = ", ".join(str(p) for p in scan.unreadable[:3])
        return ShmVerdict(f, False, f"open files of pid(s) {shown} unreadable", naming, True)
    age = f.age_s(now_epoch)
    if age is None:
        return ShmVerdict(f, False, "age unknown (no clock)", naming)
    if age < min_age_s:
        return ShmVerdict(f, False, f"unchanged {age:.0f} s, under {min_age_s:g} s", naming)
    return ShmVerdict(f, True, f"held by no process, unchanged {age:.0f} s", naming)


def match_naming(name: str, namings: Sequence[tuple[str, str]]) -> str | None:
    """The first (label, glob) whose glob matches the file name."""
    return next((label for label, glob in namings if fnmatch.fnmatchcase(name, glob)), None)


def leaked_posix_shm(
    dirs: Sequence[str] = DEFAULT_SHM_DIRS,
    min_age_s: float = 60.0,
    host: Host | None = None,
    namings: Sequence[tuple[str, str]] = (),
    now_epoch: float | None = None,
) -> list[ShmVerdict]:
    """Files under `dirs` no live process holds, unchanged for `min_age_s` (live by default)."""
    import time

    if host is None:
        from accelhost.host.live import LiveHost

        host = LiveHost()
    now = time.time() if now_epoch is None and host.is_live else now_epoch
    scan = scan_held(host)
    out = []
    for files in list_shm_files(host, dirs).values():
        siblings = held_births(files or [], scan)
        for f in files or []:
            naming = match_naming(f.name, namings)
            verdict = judge_shm_file(f, scan, now, min_age_s, naming, siblings)
            if verdict.leaked:
                out.append(verdict)
    return out
