"""`/proc/self/status`: the CPUs this process may run on (`Cpus_allowed_list`)."""

from __future__ import annotations

from accelhost.cpulist import parse_cpulist

SOURCE = "/proc/self/status"
# vllm-ascend's own words when the line is missing (the Ascend reader raises them)
MISSING_LINE = "Can not found specific 'Cpus_allowed_list' in the '/proc/self/status' file."


def find_allowed_cpus(text: str, source: str = SOURCE) -> list[int] | None:
    """The allowed CPU list in written order; None when the file has no such line.

    The value is everything after the first token, so `0-3, 8` (spaces after commas)
    reads whole. The one parser of `Cpus_allowed_list` in accelhost.
    """
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list"):
            parts = line.split(None, 1)
            return parse_cpulist(parts[1] if len(parts) > 1 else "", f"{source} Cpus_allowed_list")
    return None
