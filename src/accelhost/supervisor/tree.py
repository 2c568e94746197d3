"""The supervised tree: as /proc shows it right now, and every process it ever had, from
the kernel's process events.

As a subreaper (or PID 1) the supervisor inherits every orphan of the tree, so parent
links reach a double fork or a `setsid` escape. Only `stat` is read host-wide; `cmdline`
only for members, when needed.

A scan of /proc sees only the processes alive at that moment, so a grandchild that made a
System V segment and exited between two looks (`sh -c 'make_segment & wait'`) could not be
tied to the tree, and its segment was left behind. The kernel's connector
(`kernel.procevents`) reports every fork and exit as it happens, so the set of pids forked
from the tree is exact without polling: the supervisor wakes when the socket has data (at
most `loop.BATCH_S` apart). A BPF filter (`kernel.procevents` too) drops in the kernel the
events of processes outside the tree (`ForkTracker` says which pass); where none can be had
(no `ns_last_pid`, a tree too large for one program, the kernel refuses it) every event is
read.

It needs root (CAP_NET_ADMIN) and the initial PID namespace; elsewhere `ForkTracker.open`
returns None, and the supervisor falls back to what its scans and reaping see, and says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field

from accelhost.host.base import Host
from accelhost.host.live import live_host
from accelhost.kernel.procevents import (
    PROC_EVENT_EXIT,
    PROC_EVENT_FORK,
    ProcEvents,
    attach,
    detach,
    fork_filter,
)
from accelhost.readers.procs import (
    ProcessInfo,
    descendants,
    hears_process_events,
    list_pids,
    read_process,
)


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
    found = {pid: read_process(host, pid) for pid in tree}
    return {p: f for p, f in found.items() if f and f.start_ticks == tree[p].start_ticks}


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


MAX_OUTSIDERS = 256  # outsiders whose forks the filter drops by pid


@dataclass
class ForkTracker:
    """The tgids forked from `root` (directly or through any chain of descendants).

    After each drain the classic BPF filter (`kernel.procevents.fork_filter`) is rebuilt from
    `floor`, the pid counter (`ns_last_pid`) + 1 read *before* that drain, and the live
    tree. It passes:
    - forks by a process of the tree it lists, or by any process whose pid is at least
      `floor`: a member born since the counter was read is followed before it is listed
      (a fork's event is queued before the child runs, so its own forks come after it);
    - forks whose child's pid is below `floor`: pids are handed out in increasing order,
      so a child below the floor the filter had when this cycle began is the counter
      wrapping round (it starts again at 300: `wraps`, and the filter is armed afresh);
      one between that and `floor` is a member born before the counter was read whose
      event came after the drain: its own forks may have been dropped, said as `lost` (as
      an overflow is), and only what was seen is trusted;
    - exits of the processes it lists (a member born since is checked alive once listed).
    Outsiders' forks are not seen. A pid an outsider and the tree both had needs the
    counter to pass it twice (or the outsider was there at the start: `outside`): after
    one wrap, a new member whose pid was handed out since the start (to somebody else
    then, maybe) is ambiguous, unless the tree had it then; after two, every new member.
    A host whose pid_max is large (systemd sets 4194304) wraps rarely; a small one (32768)
    under a fork loop does every few seconds, and only the segments of processes the tree
    started since then are kept as ambiguous.
    """

    events: ProcEvents
    root: int
    members: set[int] = field(default_factory=set)  # every tgid ever in the tree
    live: set[int] = field(default_factory=set)  # members whose exit has not been seen
    # pids some process outside the tree had during the run (those alive at the start, and
    # every fork outside it seen since): bounded by the kernel's pid_max
    outside: set[int] = field(default_factory=set)
    # Member pids that a process outside the tree had too, before or after: a segment whose
    # creator has such a pid may be either's, so it stays.
    ambiguous: set[int] = field(default_factory=set)
    floor: int | None = None  # the attached filter's floor (None: every event read)
    start: int | None = None  # the first floor: pids from here on were handed out since
    wraps: int = 0  # times the pid counter wrapped round while the tree was followed
    raced: bool = False  # a member's forks may have been filtered out (said as `lost`)
    read_count: int = 0  # events read (what the filter let through)
    _since: int | None = None  # the floor when this cycle of the counter began
    _rearm: bool = False  # wrapped in this drain: arm the filter afresh after it
    _listed: frozenset[int] = frozenset()
    _before_wrap: frozenset[int] = frozenset()
    # outsiders at or above the floor seen forking (old processes, after a wrap): the
    # filter drops their forks; alive ones only, re-checked at each update
    _outsiders: frozenset[int] = frozenset()
    _forkers: set[int] = field(default_factory=set)

    @classmethod
    def open(cls, root: int, alive: Iterable[int] = ()) -> ForkTracker | None:
        """A working tracker, or None where the kernel gives no events to this process.
        `alive`: the pids of the processes there before the tree (all outside it)."""
        kinds = PROC_EVENT_FORK | PROC_EVENT_EXIT
        events = ProcEvents.open(kinds) if hears_process_events(live_host()) else None
        if events is None:
            return None
        tracker = cls(events, root, outside=set(alive) - {root})
        counter = _last_pid()
        tracker.drain()  # what came before the filter, unfiltered
        tracker._refilter(counter)
        tracker.start = tracker._since = tracker.floor
        return tracker

    @property
    def lost(self) -> bool:
        return self.events.lost or self.raced

    def drain(self) -> None:
        """Read every queued event, then follow the tree's new members; never blocks."""
        armed = self.floor is not None
        counter = _last_pid() if armed else None  # before reading
        for what, ints in self.events.read():
            self.read_count += 1
            self._apply(what, ints)
        if self._rearm:  # from the counter as it is after the wrap
            self._rearm = False
            self._refilter(_last_pid())
            self._since = self.floor
        elif armed:
            self._refilter(counter)

    def _refilter(self, counter: int | None) -> None:
        tree = frozenset({self.root} | self.live)
        host = live_host()
        outsiders = frozenset(
            pid
            for pid in sorted(self._outsiders | self._forkers)[:MAX_OUTSIDERS]
            if counter is not None and pid >= counter + 1 and _alive(host, pid)
        )
        self._forkers.clear()
        if counter is None or (program := fork_filter(tree, counter + 1, outsiders)) is None:
            self._read_everything()
            return
        if (tree, outsiders, counter + 1) == (self._listed, self._outsiders, self.floor):
            return
        try:
            attach(self.events.sock, program)
        except OSError:
            self._read_everything()
            return
        new, self._listed, self.floor = tree - self._listed, tree, counter + 1
        self._outsiders = outsiders
        for pid in new - {self.root}:  # its exit may have come before it was listed
            if not _alive(host, pid):
                self.live.discard(pid)

    def _read_everything(self) -> None:
        if self.floor is not None:
            with contextlib.suppress(OSError):
                detach(self.events.sock)
        self.floor = None

    def _apply(self, what: int, ints: tuple[int, ...]) -> None:
        if what == PROC_EVENT_FORK:
            _parent_pid, parent_tgid, child_pid, child_tgid = ints
            if child_pid != child_tgid:
                return  # a new thread of an existing process
            below = self.floor is not None and child_tgid < self.floor
            # below where the counter was when this cycle began: it wrapped round (it
            # starts again at 300); below the floor but not that: a late event
            wrap = below and self._since is not None and child_tgid < self._since
            if wrap:
                self.wraps += 1
                if self.wraps == 1:
                    self._before_wrap = frozenset(self.members)
                # until the filter is armed afresh, it passes every small pid: no gap
                self.floor, self._since, self._rearm = None, None, True
            if parent_tgid == self.root or parent_tgid in self.live:
                if (below and not wrap and child_tgid not in self._listed) or (
                    child_tgid in self._outsiders  # an outsider's pid, reused by the tree
                ):
                    self.raced = True  # its forks until now may have been filtered out
                if child_tgid in self.outside or self._reused(child_tgid):
                    self.ambiguous.add(child_tgid)
                self.members.add(child_tgid)
                self.live.add(child_tgid)
            else:
                self.outside.add(child_tgid)
                if child_tgid in self.members:
                    self.ambiguous.add(child_tgid)
                if self.floor is not None and parent_tgid >= self.floor:
                    self._forkers.add(parent_tgid)  # not the tree's: drop its forks
        elif what == PROC_EVENT_EXIT:
            pid, tgid = ints[0], ints[1]
            if pid == tgid:
                self.live.discard(tgid)

    def _reused(self, pid: int) -> bool:
        """Whether an outsider whose fork the filter hid may have had `pid` before: after
        one wrap, if it was handed out since the start and not to the tree; after two,
        always."""
        if self.wraps == 1:
            return self.start is not None and pid >= self.start and pid not in self._before_wrap
        return self.wraps >= 2

    def close(self) -> None:
        self.events.close()


def _alive(host: Host, pid: int) -> bool:
    info = read_process(host, pid, cmdline=False)
    return info is not None and not info.is_zombie


def _last_pid() -> int | None:
    """The pid the kernel handed out last (in this PID namespace), or None."""
    value = (live_host().read_file("/proc/sys/kernel/ns_last_pid") or "").strip()
    return int(value) if value.isdigit() else None
