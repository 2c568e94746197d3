"""POSIX shared memory files (/dev/shm) that the supervised tree made and left behind.

A graceful stop unlinks vLLM's `psm_*` and `sem.mp-*`; a SIGKILL leaves them. A file
carries no creator pid, so `run` removes exactly the files that are new since the start
(by device and inode), were seen held by a live process of the tree (looked at on each
creation, through inotify, and when the teardown begins), and nobody holds at the end.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from accelhost.host.base import Host
from accelhost.host.libc import libc
from accelhost.readers.shmfiles import list_shm_files, scan_held, stat_shm_file
from accelhost.remove.shm import unlink_shm_file
from accelhost.supervisor.options import RemovedFile

Inode = tuple[int, int]  # (st_dev, st_ino)
_EVENT = struct.Struct("=iIII")  # struct inotify_event: wd, mask, cookie, len (then name)
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_Q_OVERFLOW = 0x4000


class CreationWatch:
    """Names of the files created in (or moved into) the directories, from inotify."""

    def __init__(self, fd: int, dirs: dict[int, str]) -> None:
        self.fd = fd
        self.dirs = dirs  # watch descriptor -> directory

    @classmethod
    def open(cls, dirs: Sequence[str]) -> CreationWatch | None:
        """None where inotify is missing or refused: then only the teardown's look counts."""
        try:
            lib = libc()
            fd = int(lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC))
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        watched: dict[int, str] = {}
        for d in dirs:
            wd = int(lib.inotify_add_watch(fd, os.fsencode(d), IN_CREATE | IN_MOVED_TO))
            if wd >= 0:
                watched[wd] = d.rstrip("/")
        if not watched:
            os.close(fd)
            return None
        return cls(fd, watched)

    def drain(self) -> list[str] | None:
        """The paths created since the last drain; None when the kernel's queue overflowed
        (some names are unknown)."""
        paths: list[str] = []
        overflow = False
        with contextlib.suppress(OSError):  # EAGAIN: nothing more queued
            while data := os.read(self.fd, 65536):
                at = 0
                while at + _EVENT.size <= len(data):
                    wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
                    name = data[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0")
                    at += _EVENT.size + length
                    if mask & IN_Q_OVERFLOW:
                        overflow = True
                    elif wd in self.dirs and name:
                        paths.append(f"{self.dirs[wd]}/{os.fsdecode(name)}")
        return None if overflow else paths

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _mount_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


@dataclass
class ShmFileLedger:
    dirs: Sequence[str]
    before: frozenset[Inode]
    held_by_tree: set[Inode] = field(default_factory=set)

    @classmethod
    def start(cls, host: Host, dirs: Sequence[str]) -> ShmFileLedger:
        listing = list_shm_files(host, dirs).values()
        return cls(dirs, frozenset((f.dev, f.inode) for found in listing for f in found or []))

    def unknown(self, paths: Iterable[str]) -> bool:
        """Some of these files exist, are new, and are not known to be the tree's yet."""
        found = (stat_shm_file(path) for path in paths)
        keys = ((f.dev, f.inode) for f in found if f is not None)
        return any(k not in self.before and k not in self.held_by_tree for k in keys)

    def observe(self, host: Host, pids: Iterable[int]) -> None:
        """Note the files these live members of the tree hold now (of a member in another
        mount namespace, only mapped inodes: its paths name another /dev/shm)."""
        mine = _mount_ns("self")
        same: list[int] = []
        other: list[int] = []
        for pid in pids:
            (same if _mount_ns(pid) == mine else other).append(pid)
        prefixes = tuple(d.rstrip("/") + "/" for d in self.dirs)
        if same:
            scan = scan_held(host, same)
            self.held_by_tree |= scan.inodes
            named = (stat_shm_file(path) for path in scan.paths if path.startswith(prefixes))
            self.held_by_tree.update((f.dev, f.inode) for f in named if f is not None)
        if other:
            self.held_by_tree |= scan_held(host, other).inodes


_HELD = {"held": "still held by a live process", "unreadable": "cannot tell who holds it"}


def remove_left_files(
    host: Host, ledger: ShmFileLedger, log: Callable[[str], None]
) -> list[RemovedFile]:
    """Unlink the tree's files that nobody holds any more, each re-checked by
    `accelhost.remove` just before (same inode, held by nobody)."""
    removed: list[RemovedFile] = []
    kept_new = 0
    for found in list_shm_files(host, ledger.dirs).values():
        for f in found or []:
            key = (f.dev, f.inode)
            if key in ledger.before:
                continue
            if key not in ledger.held_by_tree:
                kept_new += 1
                continue
            done = unlink_shm_file(host, f.path, f.dev, f.inode)
            if done.status in ("held", "unreadable"):
                log(f"kept {f.path}: {_HELD[done.status]}")
            elif done.status == "failed":
                log(f"could not remove {f.path}: {done.why}")
            elif done.status == "removed":
                removed.append(RemovedFile(f.path, done.freed_bytes))
                log(f"removed {f.path} ({done.freed_bytes} bytes used) left by the tree")
    if kept_new:
        log(
            f"kept {kept_new} new file(s) under {', '.join(ledger.dirs)}: "
            "no process of the tree held them"
        )
    return removed
