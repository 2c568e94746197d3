"""The supervised tree as /proc shows it right now.

The supervisor is a child subreaper (or PID 1), so every orphan of the command's tree is
re-parented to it: a double fork or a `setsid` escape stays reachable through parent links
from the supervisor's own pid. Reading only `stat` for the whole host (not `cmdline`) keeps
a rescan cheap; command lines are read only for members of the tree, and only when needed.
"""

from __future__ import annotations

from collections.abc import Iterable

from accelhost.host.base import Host
from accelhost.readers.procs import ProcessInfo, descendants, list_pids, read_process


def scan_tree(host: Host, root: int, extra: Iterable[int] = ()) -> dict[int, ProcessInfo]:
    """Every live descendant of `root` (root excluded), plus the `extra` pids (cgroup
    members) and their descendants. Command lines are left empty; see `with_cmdlines`."""
    procs: dict[int, ProcessInfo] = {}
    for pid in list_pids(host):
        info = read_process(host, pid, cmdline=False)
        if info is not None:
            procs[pid] = info
    members = set(descendants(procs, root))
    for pid in extra:
        if pid in procs and pid != root:
            members.add(pid)
            members.update(descendants(procs, pid))
    return {pid: procs[pid] for pid in sorted(members)}


def with_cmdlines(host: Host, tree: dict[int, ProcessInfo]) -> dict[int, ProcessInfo]:
    """The same members with their command lines (process titles such as
    `VLLM::EngineCore` live there, /proc/PID/comm truncates them to 15 characters)."""
    out: dict[int, ProcessInfo] = {}
    for pid, info in tree.items():
        full = read_process(host, pid)
        if full is not None and full.start_ticks == info.start_ticks:
            out[pid] = full
    return out


def still_same(host: Host, info: ProcessInfo) -> bool:
    """The pid still names the process we scanned (not a new one that reused the pid)."""
    now = read_process(host, info.pid, cmdline=False)
    return now is not None and now.start_ticks == info.start_ticks


class TreeScanner:
    """Repeated scans of one tree, cheap enough to run every few seconds for days.

    A process outside the tree can never join it: orphans re-parent to their nearest
    subreaper ancestor, which is us only for our own descendants. So a pid once seen outside
    need not be read again; only new pids and members are. A pid that died and was reused
    by one of ours between two looks would be missed, so every `full_every`-th scan reads
    everything again (teardown always uses full scans)."""

    def __init__(self, host: Host, root: int, full_every: int = 12) -> None:
        self.host = host
        self.root = root
        self.full_every = full_every
        self._outside: set[int] = set()
        self._count = 0

    def scan(self, extra: Iterable[int] = ()) -> dict[int, ProcessInfo]:
        self._count += 1
        if self.root == 1 or self._count % self.full_every == 1:
            tree = scan_tree(self.host, self.root, extra)
            self._outside = set(list_pids(self.host)) - set(tree) - {self.root}
            return tree
        procs: dict[int, ProcessInfo] = {}
        pids = list_pids(self.host)
        self._outside.intersection_update(pids)
        for pid in pids:
            if pid in self._outside:
                continue
            info = read_process(self.host, pid, cmdline=False)
            if info is not None:
                procs[pid] = info
        members = set(descendants(procs, self.root))
        for pid in extra:
            if pid in procs and pid != self.root:
                members.add(pid)
                members.update(descendants(procs, pid))
        self._outside.update(pid for pid in procs if pid not in members and pid != self.root)
        return {pid: procs[pid] for pid in sorted(members)}
