"""System V shared memory: read the segment table through the host, remove by shmid.

Removal is `shmctl(shmid, IPC_RMID)` one segment at a time; no `ipcrm`, no "remove all".
"""

from __future__ import annotations

import ctypes

from accelhost.host.base import Host
from accelhost.host.libc import check, libc
from accelhost.parsers.sysvipc import ShmSegment, parse_sysvipc_shm

IPC_RMID = 0
SHM_PATH = "/proc/sysvipc/shm"


def read_segments(host: Host) -> list[ShmSegment] | None:
    """Every segment on the host; None when the table cannot be read (not Linux, no /proc)."""
    text = host.read_file(SHM_PATH)
    if text is None:
        return None
    return parse_sysvipc_shm(text)


def remove_segment(shmid: int) -> None:
    """Mark a segment for destruction (freed when its last attachment goes). OSError on failure."""
    shmctl = libc().shmctl
    shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    shmctl.restype = ctypes.c_int
    check(shmctl(shmid, IPC_RMID, None), f"shmctl({shmid}, IPC_RMID)")
