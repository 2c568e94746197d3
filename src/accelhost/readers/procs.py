"""Processes as /proc shows them, read through the host door (live or snapshot).

Shared by the doctor, the cleaner, the supervisor and the applier: one reader, one
`ProcessInfo`, one walk of a process's open files (`open_fds`).
Processes vanish while being read; a vanished process is simply absent (None).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from accelhost.errors import ParseError
from accelhost.host.base import FileStat, Host
from accelhost.parsers.procstat import parse_proc_stat, parse_status_field


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    comm: str
    cmdline: tuple[str, ...]
    start_ticks: int

    @property
    def command(self) -> str:
        """The full command line (process titles like `VLLM::EngineCore` included)."""
        return " ".join(self.cmdline) if self.cmdline else f"[{self.comm}]"

    @property
    def is_kernel_thread(self) -> bool:
        return not self.cmdline and (self.ppid == 2 or self.pid == 2)

    @property
    def is_zombie(self) -> bool:
        return self.state == "Z"

    @property
    def is_uninterruptible(self) -> bool:
        return self.state == "D"


def list_pids(host: Host) -> list[int]:
    """Every process id under /proc, ascending."""
    return sorted(int(n) for n in host.list_dir("/proc") or [] if n.isdigit())


def read_process(host: Host, pid: int, *, cmdline: bool = True) -> ProcessInfo | None:
    """One process, or None when it is gone (or its stat cannot be read).

    `cmdline=False` reads only /proc/PID/stat (cmdline stays empty): a whole-host rescan
    by the supervisor stays cheap that way.
    """
    stat_text = host.read_file(f"/proc/{pid}/stat")
    if not stat_text:
        return None
    try:
        stat = parse_proc_stat(stat_text, f"/proc/{pid}/stat")
    except ParseError:
        return None
    args: tuple[str, ...] = ()
    if cmdline:
        raw = host.read_file(f"/proc/{pid}/cmdline") or ""
        args = tuple(a for a in raw.split("\0") if a)
    return ProcessInfo(
        stat.pid, stat.ppid, stat.pgid, stat.sid, stat.state, stat.comm, args, stat.start_ticks
    )


def descendants(procs: Mapping[int, ProcessInfo], root: int) -> list[int]:
    """Every descendant of `root` through parent links, breadth first (root excluded)."""
    kids: dict[int, list[int]] = {}
    for pid in sorted(procs):
        kids.setdefault(procs[pid].ppid, []).append(pid)
    seen = {root}
    queue = [root]
    for pid in queue:  # the queue grows while it is walked: one level after another
        for child in kids.get(pid, ()):
            if child not in seen:
                seen.add(child)
                queue.append(child)
    return queue[1:]


def ancestors(procs: Mapping[int, ProcessInfo], pid: int) -> list[int]:
    """The chain of parents of `pid` up to PID 1 (or as far as /proc shows), nearest first."""
    out: list[int] = []
    seen = {pid}
    cur = procs.get(pid)
    while cur is not None and cur.ppid > 0 and cur.ppid not in seen:
        out.append(cur.ppid)
        seen.add(cur.ppid)
        cur = procs.get(cur.ppid)
    return out


def open_fds(host: Host, pid: int) -> dict[int, str] | None:
    """fd -> what it points at (`/dev/davinci0`, `/dev/shm/psm_x`, `socket:[..]`, a path
    ending in ` (deleted)`), in the order /proc lists them; None when the process's fd
    directory cannot be read (gone, or not ours to read). The one walk of /proc/PID/fd:
    device holders, /dev/shm holders and a process's accelerator all read it here."""
    names = host.list_dir(f"/proc/{pid}/fd")
    if names is None:
        return None
    out = {}
    for name in names:
        target = host.read_link(f"/proc/{pid}/fd/{name}") if name.isdigit() else None
        if target is not None:  # closed since the listing
            out[int(name)] = target
    return out


def open_file_stat(host: Host, pid: int, fd: int) -> FileStat | None:
    """The file behind one of a process's fds (the link followed): its device and inode
    name it even where the process sees it under another mount namespace's path."""
    return host.stat(f"/proc/{pid}/fd/{fd}")


# The kernel's initial namespaces have fixed inode numbers (PROC_USER_INIT_INO and
# PROC_PID_INIT_INO in include/linux/proc_ns.h).
_INIT_USER_NS_INO = 0xEFFFFFFD
_INIT_PID_NS_INO = 0xEFFFFFFC
CAP_NET_ADMIN = 12
# ptrace_may_access: the capability that opens every process's fd and maps to a reader.
CAP_SYS_PTRACE = 19


def caps(status: str | None, field: str = "CapPrm") -> int | None:
    """A capability set (`CapPrm`, `CapEff`) in a /proc/PID/status text."""
    value = parse_status_field(status or "", field)
    try:
        return None if value is None else int(value, 16)
    except ValueError:
        return None


def _has_cap(self_status: str | None, cap: int) -> bool:
    effective = caps(self_status, "CapEff")
    return effective is not None and bool(effective >> cap & 1)


def may_ptrace_all(self_status: str | None) -> bool:
    """The reader (its /proc/self/status) holds CAP_SYS_PTRACE in its effective set.

    A process's open files and mappings (/proc/PID/fd, /proc/PID/maps) are readable only
    to its own user or to a reader with CAP_SYS_PTRACE (and CAP_DAC_READ_SEARCH for the fd
    directory): without it, holder scans say "cannot tell" instead of "none"."""
    return _has_cap(self_status, CAP_SYS_PTRACE)


def hears_process_events(host: Host) -> bool:
    """Whether the kernel sends this process its process events (`kernel.procevents`):
    only to CAP_NET_ADMIN in the initial user and PID namespaces, in silence elsewhere."""
    try:
        user_ns, pid_ns = host.stat("/proc/self/ns/user"), host.stat("/proc/self/ns/pid")
        status = host.read_file("/proc/self/status")
    except OSError:
        return False
    return (
        user_ns is not None
        and user_ns.inode == _INIT_USER_NS_INO
        and pid_ns is not None
        and pid_ns.inode == _INIT_PID_NS_INO
        and _has_cap(status, CAP_NET_ADMIN)
    )


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
