"""Shared memory: unlink one /dev/shm file, IPC_RMID one System V segment, each re-checked.

One at a time: look again now; keep it when it is gone or changed, when the caller's rule
says so on that fresh look, or (a file) when a live process holds it; else `announce` it
(the cleaner journals there: no record, no action) and remove it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from accelhost.host.base import Host
from accelhost.kernel.libc import check, libc
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.shmfiles import ShmFile, path_is_held, stat_shm_file
from accelhost.readers.sysv import read_segments

IPC_RMID = 0

# removed: done now; gone: nothing there any more; replaced: the name or shmid now names
# another thing; kept: the caller's rule keeps it; held / unreadable: a live process holds
# the file, or some process's files cannot be read; failed: the system call refused.
Status = Literal["removed", "gone", "replaced", "kept", "held", "unreadable", "failed"]

# A caller's rule, given the fresh look: (may it go, why). The why of a kept thing is
# shown; the why of one that goes is what `announce` records.
Rule = Callable[[ShmSegment], tuple[bool, str]]
FileRule = Callable[[ShmFile], tuple[bool, str]]


@dataclass(frozen=True)
class Removal:
    target: str  # "shmid 32768" or the file's path
    status: Status
    why: str = ""  # why it was kept, or why the call failed
    tried: bool = False  # announced (its outcome is journaled too)
    freed_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    @property
    def result(self) -> str:
        if self.status == "removed":
            return "removed"
        if self.status == "gone":
            return "already gone"
        return f"{'failed' if self.status == 'failed' else 'kept'}: {self.why}"


def _anything(_thing: object) -> tuple[bool, str]:
    return True, ""


def ipc_rmid(shmid: int) -> None:
    """Mark a segment for destruction (freed when its last attachment goes). OSError on failure."""
    shmctl = libc().shmctl
    shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    shmctl.restype = ctypes.c_int
    check(shmctl(shmid, IPC_RMID, None), f"shmctl({shmid}, IPC_RMID)")


def remove_segment(
    host: Host,
    shmid: int,
    rule: Rule = _anything,
    announce: Callable[[ShmSegment, str], None] = lambda _seg, _why: None,
    rmid: Callable[[int], None] = ipc_rmid,
) -> Removal:
    """IPC_RMID of `shmid`, if the segment table read now still has it and `rule` lets it go."""
    target = f"shmid {shmid}"
    seg = next((s for s in read_segments(host) or [] if s.shmid == shmid), None)
    if seg is None:
        return Removal(target, "gone")
    go, why = rule(seg)
    if not go:
        return Removal(target, "kept", why)
    announce(seg, why)
    try:
        rmid(shmid)
    except OSError as exc:
        return Removal(target, "failed", str(exc), tried=True)
    return Removal(target, "removed", tried=True, freed_bytes=seg.size)


def _not_that_file(path: str, now: ShmFile | None, tried: bool = False) -> Removal:
    """The name no longer names the file judged: gone, or another file's now."""
    if now is None:
        return Removal(path, "gone", tried=tried)
    return Removal(path, "replaced", "the name now belongs to another file", tried=tried)


def unlink_shm_file(
    host: Host,
    path: str,
    dev: int,
    inode: int,
    rule: FileRule = _anything,
    announce: Callable[[ShmFile, str], None] = lambda _file, _why: None,
) -> Removal:
    """unlink(`path`), if it is still the file (`dev`, `inode`) it was judged as, `rule`
    lets it go, and no live process holds it open or mapped."""
    fresh = stat_shm_file(path)
    if fresh is None or (fresh.dev, fresh.inode) != (dev, inode):
        return _not_that_file(path, fresh)
    go, why = rule(fresh)
    if not go:
        return Removal(path, "kept", why)
    held = path_is_held(host, path)
    if held is None:
        return Removal(path, "unreadable", "some process's open files cannot be read")
    if held:
        return Removal(path, "held", "a live process holds it open or mapped")
    announce(fresh, why)
    # The holder scan above takes a while: a name unlinked and made again meanwhile (an
    # engine restarting under a fixed name) names a new file, judged on its own another time.
    again = stat_shm_file(path)
    if again is None or (again.dev, again.inode) != (dev, inode):
        return _not_that_file(path, again, tried=True)
    try:
        os.unlink(path)
    except FileNotFoundError:
        return Removal(path, "gone", tried=True)
    except OSError as exc:
        return Removal(path, "failed", exc.strerror or str(exc), tried=True)
    return Removal(path, "removed", tried=True, freed_bytes=fresh.used_bytes)
