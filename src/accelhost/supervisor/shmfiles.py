"""POSIX shared memory files (/dev/shm) that the supervised tree made and left behind.

A graceful stop unlinks vLLM's `psm_*` and `sem.mp-*`; a SIGKILL leaves them. A file
carries no creator pid, so `run` removes exactly the files that are new since the start
(by device and inode), were seen held by a live process of the tree (looked at on each
creation, through inotify, and when the teardown begins), and nobody holds at the end.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from accelhost.host.base import Host
from accelhost.readers.shmfiles import list_shm_files, scan_held, stat_shm_file
from accelhost.remove.shm import unlink_shm_file
from accelhost.supervisor.options import RemovedFile

Inode = tuple[int, int]  # (st_dev, st_ino)


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
