"""`/proc/self/status`: the CPUs this process may run on (`Cpus_allowed_list`)."""

from __future__ import annotations

from accelhost.cpulist import parse_cpulist
from accelhost.errors import ParseError

SOURCE = "/proc/self/status"
MISSING_LINE = "Can not found specific 'Cpus_allowed_list' in the '/proc/self/status' file."


def parse_allowed_cpus(text: str | None, source: str = SOURCE) -> list[int]:
    """The allowed CPU list, in written order. A missing file is the empty list.

    The value is everything after the first token, so `0-3, 8` (spaces after commas)
    reads whole.
    """
    if text is None:
        return []
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list"):
            parts = line.split(None, 1)
            return parse_cpulist(parts[1] if len(parts) > 1 else "", f"{source} Cpus_allowed_list")
    raise ParseError(source, MISSING_LINE)
