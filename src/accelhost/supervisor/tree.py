"""The supervised tree as /proc shows it right now: as a subreaper (or PID 1) the
supervisor inherits every orphan of the tree, so parent links reach a double fork or a
`setsid` escape. Only `stat` is read host-wide; `cmdline` only for members, when needed.
"""

from __future__ import annotations

from collections.abc import Iterable

from accelhost.host.base import Host
from accelhost.readers.procs import ProcessInfo, descendants, list_pids, read_process


def scan_tree(host: Host, root: int, extra: Iterable[int] = ()) -> dict[int, ProcessInfo]:
    """Every live descendant of `root` (root excluded), plus the `extra` pids (cgroup
    members) and their descendants. Command lines are left empty; see `with_cmdlines`."""
    return _members(_read(host, list_pids(host)), root, extra)


def alive_only(tree: dict[int, ProcessInfo]) -> dict[int, ProcessInfo]:
    return {pid: i for pid, i in tree.items() if i.state not in ("Z", "X")}


def _read(host: Host, pids: Iterable[int]) -> dict[int, ProcessInfo]:
    found = {pid: read_process(host, pid, cmdline=False) for pid in pids}
    return {pid: info for pid, info in found.items() if info is not None}


def _members(
    procs: dict[int, ProcessInfo], root: int, extra: Iterable[int]
) -> dict[int, ProcessInfo]:
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

    A process outside the tree can never join it (orphans re-parent to their nearest
    subreaper), so a pid once seen outside is not read again; a pid reused by one of ours
    between two looks would be missed, so every `full_every`-th scan reads everything."""

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
        pids = list_pids(self.host)
        self._outside.intersection_update(pids)
        procs = _read(self.host, (pid for pid in pids if pid not in self._outside))
        tree = _members(procs, self.root, extra)
        self._outside.update(pid for pid in procs if pid not in tree and pid != self.root)
        return tree
