"""What this reader may see of other processes.

A process's open files and mappings (/proc/PID/fd, /proc/PID/maps) are readable only to
its own user or to a reader with CAP_SYS_PTRACE (and CAP_DAC_READ_SEARCH for the fd
directory); a /proc mounted with `hidepid` hides other users' processes altogether. The
doctor's holder scans and process table use this to say "cannot tell" instead of "none".
"""

from __future__ import annotations

from accelhost.host.base import Host
from accelhost.parsers.procstat import parse_status_field

# ptrace_may_access: the capability that opens every process's fd and maps to a reader.
CAP_SYS_PTRACE = 19


def caps(status: str | None, field: str = "CapPrm") -> int | None:
    """A capability set (`CapPrm`, `CapEff`) in a /proc/PID/status text."""
    value = parse_status_field(status or "", field)
    try:
        return None if value is None else int(value, 16)
    except ValueError:
        return None


def may_ptrace_all(self_status: str | None) -> bool:
    """The reader (its /proc/self/status) holds CAP_SYS_PTRACE in its effective set."""
    effective = caps(self_status, "CapEff")
    return effective is not None and bool(effective >> CAP_SYS_PTRACE & 1)


def proc_hides(host: Host) -> str | None:
    """Why /proc may list only some processes to this reader: the `hidepid` option of its
    mount, unless the reader may ptrace anything (then nothing is hidden); else None."""
    if may_ptrace_all(host.read_file("/proc/self/status")):
        return None
    for line in (host.read_file("/proc/self/mountinfo") or "").splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 5 or fields[4] != "/proc" or len(after) < 3:
            continue
        for opt in after[2].split(","):
            name, _, value = opt.partition("=")
            if name == "hidepid" and value not in ("0", "off"):
                return f"/proc is mounted with hidepid={value}: other users' processes are hidden"
    return None
