"""A process's namespaces, read through the host door.

Two processes share /dev/shm and System V segments exactly when their `ns/ipc` links
match, whatever the runtime called it; `NSpid:` ending in 1 marks a container's PID 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accelhost.host.base import Host
from accelhost.parsers.procstat import parse_status_field

NS_KINDS = ("pid", "ipc", "mnt")
_NS_LINK = re.compile(r"^([a-z_]{1,32}):\[(\d{1,20})\]$")


@dataclass(frozen=True)
class Namespaces:
    """Namespace inode numbers (None: the link could not be read) and the NSpid chain."""

    pid: int | None = None
    ipc: int | None = None
    mnt: int | None = None
    nspid: tuple[int, ...] = ()

    @property
    def is_namespace_init(self) -> bool:
        """PID 1 of a nested PID namespace (a container's init), not the host's PID 1."""
        return len(self.nspid) > 1 and self.nspid[-1] == 1


def parse_ns_link(target: str | None) -> int | None:
    """`ipc:[4026531839]` -> 4026531839; None for anything else."""
    if not target:
        return None
    m = _NS_LINK.match(target.strip())
    return int(m.group(2)) if m else None


def parse_nspid(status: str | None) -> tuple[int, ...]:
    """The `NSpid:` values of a /proc/PID/status text (empty when absent or malformed)."""
    values = (parse_status_field(status or "", "NSpid") or "").split()
    if values and len(values) <= 64 and all(v.isascii() and v.isdigit() for v in values):
        return tuple(int(v) for v in values)
    return ()


def read_namespaces(host: Host, pid: int) -> Namespaces:
    """The namespaces of one process (absent links stay None: gone, or not ours to read)."""
    pid_ns, ipc, mnt = (parse_ns_link(host.read_link(f"/proc/{pid}/ns/{k}")) for k in NS_KINDS)
    return Namespaces(pid_ns, ipc, mnt, parse_nspid(host.read_file(f"/proc/{pid}/status")))
