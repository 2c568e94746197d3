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
    lines = text.splitlines()
    for n, line in enumerate(lines):
        parts = line.split()
        if not parts or parts[0] == "key":
            continue
        if len(parts) < 14:
            raise ParseError(SOURCE, f"line {n + 1} has {len(parts)} columns, expected 14+")
        try:
            nums = [int(p) for p in parts[:16] if p]
            perms = int(parts[2], 8)
        except ValueError:
            raise ParseError(SOURCE, f"line {n + 1} is not numeric: {line.strip()!r}") from None
        segments.append(
            ShmSegment(
                key=nums[0],
                shmid=nums[1],
                perms=perms,
                size=nums[3],
                cpid=nums[4],
                lpid=nums[5],
                nattch=nums[6],
                uid=nums[7],
                gid=nums[8],
                cuid=nums[9],
                cgid=nums[10],
                atime=nums[11],
                dtime=nums[12],
                ctime=nums[13],
                rss=nums[14] if len(nums) > 14 else None,
                swap=nums[15] if len(nums) > 15 else None,
            )
        )
    return segments
