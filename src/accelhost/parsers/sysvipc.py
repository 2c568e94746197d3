"""`/proc/sysvipc/shm`: System V shared-memory segments.

Columns: key (signed decimal) shmid perms (octal) size cpid lpid nattch uid gid cuid cgid
atime dtime ctime rss swap. Perms bit 01000 (SHM_DEST) means "marked for destruction".
"""

from __future__ import annotations

from dataclasses import dataclass

from accelhost.errors import ParseError

SHM_DEST = 0o1000
SHM_HUGETLB = 0o4000
SOURCE = "/proc/sysvipc/shm"


@dataclass(frozen=True)
class ShmSegment:
    key: int
    shmid: int
    perms: int
    size: int
    cpid: int
    lpid: int
    nattch: int
    uid: int
    gid: int
    cuid: int
    cgid: int
    atime: int
    dtime: int
    ctime: int
    rss: int | None = None
    swap: int | None = None

    @property
    def marked_for_destruction(self) -> bool:
        return bool(self.perms & SHM_DEST)

    @property
    def key_hex(self) -> str:
        """The key as `ipcs -m` prints it (0x%08x of the unsigned value)."""
        return f"0x{self.key & 0xFFFFFFFF:08x}"


def parse_sysvipc_shm(text: str) -> list[ShmSegment]:
    """Every segment row; the header line is skipped."""
    segments = []
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0] == "key":
            continue
        if len(parts) < 14:
            raise ParseError(SOURCE, f"line {n} has {len(parts)} columns, expected 14+")
        try:
            nums = [int(p) for p in parts[:16]]
            perms = int(parts[2], 8)
        except ValueError:
            raise ParseError(SOURCE, f"line {n} is not numeric: {line.strip()!r}") from None
        # the columns in field order; rss and swap only where the kernel prints them
        segments.append(ShmSegment(nums[0], nums[1], perms, *nums[3:16]))
    return segments
