"""`/proc/<pid>/stat` and `/proc/<pid>/status`: a process's identity, family links and the
CPUs it may run on (`Cpus_allowed_list`, parsed here and nowhere else)."""

from __future__ import annotations

from dataclasses import dataclass

from accelhost.cpulist import parse_cpulist
from accelhost.errors import ParseError

# vllm-ascend's own words when the line is missing (the Ascend reader raises them)
MISSING_LINE = "Can not found specific 'Cpus_allowed_list' in the '/proc/self/status' file."


@dataclass(frozen=True)
class ProcStat:
    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    sid: int
    start_ticks: int


def parse_proc_stat(text: str, source: str = "/proc/PID/stat") -> ProcStat:
    """Fields after the command name, which may itself hold spaces and parentheses."""
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ParseError(source, "no '(comm)' field")
    rest = text[close_paren + 2 :].split()
    try:
        return ProcStat(
            pid=int(text[:open_paren]),
            comm=text[open_paren + 1 : close_paren],
            state=rest[0],
            ppid=int(rest[1]),
            pgid=int(rest[2]),
            sid=int(rest[3]),
            start_ticks=int(rest[19]),
        )
    except (IndexError, ValueError):
        raise ParseError(source, "truncated or malformed stat line") from None


def parse_status_field(text: str, field: str) -> str | None:
    """The value of `Field:` in a /proc status file (first match), stripped; None if absent."""
    prefix = field + ":"
    for line in text.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return None


def find_allowed_cpus(text: str, source: str = "/proc/self/status") -> list[int] | None:
    """The allowed CPU list in written order; None when the file has no such line.

    The value is everything after the first token, so `0-3, 8` (spaces after commas)
    reads whole.
    """
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list"):
            parts = line.split(None, 1)
            return parse_cpulist(parts[1] if len(parts) > 1 else "", f"{source} Cpus_allowed_list")
    return None
