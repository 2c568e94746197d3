"""inotify(7) on directories: the paths created in (or moved into) them since last read.

The kernel queues at most /proc/sys/fs/inotify/max_queued_events events per watcher; past
that it drops them and queues one IN_Q_OVERFLOW. `read` then says None: some names are
unknown, and the user must look at the directories in full.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import struct
from collections.abc import Iterable

from accelhost.kernel.libc import check, libc

IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_Q_OVERFLOW = 0x4000
_EVENT = struct.Struct("=iIII")  # struct inotify_event: wd, mask, cookie, len (then name)


class CreationWatch:
    """Names of the files created in (or moved into) some directories, from inotify."""

    def __init__(self, fd: int, dirs: dict[int, str]) -> None:
        self.fd = fd
        self.dirs = dirs  # watch descriptor -> directory

    @classmethod
    def open(cls, dirs: Iterable[str]) -> CreationWatch:
        """Raises OSError when there is no inotify here or no directory could be watched
        (none exists, or the limit of watches is reached); the ones that could are."""
        lib = libc()
        fd = check(lib.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC), "inotify_init1")
        lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        watched: dict[int, str] = {}
        failed = OSError(0, "no directory to watch")
        for d in dirs:
            try:
                wd = check(lib.inotify_add_watch(fd, os.fsencode(d), IN_CREATE | IN_MOVED_TO), d)
                watched[wd] = d.rstrip("/")
            except OSError as exc:
                failed = exc
        if not watched:
            os.close(fd)
            raise failed
        return cls(fd, watched)

    def fileno(self) -> int:
        return self.fd

    def read(self) -> list[str] | None:
        """The paths created since the last read, in order; never blocks. None when the
        kernel's queue overflowed: some were dropped, so look at the directories in full."""
        paths: list[str] = []
        overflow = False
        with contextlib.suppress(BlockingIOError):  # nothing more queued
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
