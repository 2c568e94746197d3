"""`/proc/<pid>/stat` and `/proc/<pid>/status`: a process's identity and family links."""

from __future__ import annotations

from dataclasses import dataclass

from accelhost.errors import ParseError


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
