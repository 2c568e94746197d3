"""System V shared memory: read the segment table through the host.

Removing one (`shmctl(shmid, IPC_RMID)`, re-checked) is `accelhost.remove.shm`'s.
"""

from __future__ import annotations

from accelhost.host.base import Host
from accelhost.parsers.sysvipc import SOURCE, ShmSegment, parse_sysvipc_shm


def read_segments(host: Host) -> list[ShmSegment] | None:
    """Every segment on the host; None when the table cannot be read (not Linux, no /proc)."""
    text = host.read_file(SOURCE)
    return None if text is None else parse_sysvipc_shm(text)
