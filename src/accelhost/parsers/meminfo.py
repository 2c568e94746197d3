"""`/proc/meminfo`: the host's HugePages pool as the kernel counts it.

Only the fields the doctor reasons about are typed; everything else stays in `fields` so
a check can quote the kernel's own numbers in its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from accelhost.errors import ParseError

SOURCE = "/proc/meminfo"


@dataclass(frozen=True)
class Meminfo:
    """Counts in pages for `HugePages_*`, kB for the rest (as the kernel prints them)."""

    hugepages_total: int | None = None
    hugepages_free: int | None = None
    hugepages_rsvd: int | None = None
    hugepages_surp: int | None = None
    hugepagesize_kb: int | None = None
    hugetlb_kb: int | None = None
    fields: dict[str, int] = field(default_factory=dict)


_TYPED = {
    "HugePages_Total": "hugepages_total",
    "HugePages_Free": "hugepages_free",
    "HugePages_Rsvd": "hugepages_rsvd",
    "HugePages_Surp": "hugepages_surp",
    "Hugepagesize": "hugepagesize_kb",
    "Hugetlb": "hugetlb_kb",
}


def parse_meminfo(text: str) -> Meminfo:
    """Every `Name: value [kB]` line; a line that is not one raises ParseError."""
    values: dict[str, int] = {}
    for n, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        name, sep, rest = line.partition(":")
        parts = rest.split()
        if not sep or not parts:
            raise ParseError(SOURCE, f"line {n + 1} is not 'Name: value': {line.strip()!r}")
        try:
            values[name.strip()] = int(parts[0])
        except ValueError:
            raise ParseError(SOURCE, f"line {n + 1} has no number: {line.strip()!r}") from None
    typed = {attr: values[key] for key, attr in _TYPED.items() if key in values}
    return Meminfo(**typed, fields=values)
