"""HugePages pools in sysfs, one per page size, globally and per NUMA node.

`/sys/kernel/mm/hugepages/hugepages-<size>kB/` holds `nr_hugepages`, `free_hugepages`,
`resv_hugepages`, `surplus_hugepages`; `/sys/devices/system/node/node<N>/hugepages/` has
the same directories per node (without `resv_hugepages`). The readers list the
directories through the host; this module only turns names and numbers into facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accelhost.errors import ParseError

_SIZE_DIR = re.compile(r"^hugepages-([0-9]{1,15})kB$")


@dataclass(frozen=True)
class HugePagePool:
    """One pool. `node` is None for the host-wide pool.

    `used` counts pages handed out plus pages promised to a mapping (reserved ones are
    still "free" in the kernel's count but cannot be given to anyone else).
    """

    size_kb: int
    node: int | None
    total: int
    free: int
    reserved: int = 0
    surplus: int = 0

    @property
    def used(self) -> int:
        return max(0, self.total - self.free + self.reserved)

    @property
    def used_fraction(self) -> float | None:
        return None if self.total <= 0 else min(1.0, self.used / self.total)

    @property
    def size_label(self) -> str:
        """`2048kB`, `1048576kB`: the kernel's own spelling, used as a metric label."""
        return f"{self.size_kb}kB"


def parse_size_dir(name: str) -> int | None:
    """`hugepages-2048kB` -> 2048; None for any other entry name."""
    m = _SIZE_DIR.match(name)
    return int(m.group(1)) if m else None


def parse_count(text: str, source: str) -> int:
    """A sysfs counter file: one decimal number."""
    try:
        return int(text.strip())
    except ValueError:
        raise ParseError(source, f"expected a number, got {text.strip()[:40]!r}") from None
