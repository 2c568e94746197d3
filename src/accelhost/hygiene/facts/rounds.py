"""A watch round that reads what changed since the last one, not the whole host.

A full look (every process's stat, cmdline, fd links and maps; every /dev/shm file's
stat) costs the same every round on a busy node although almost nothing changes between
two rounds. `IncrementalState` keeps, per live process, what the checks need of it
(`ProcessInfo`, the device nodes it holds, the shm files it holds open or maps) and, per
shm file, its stat; each round it lists /proc and the shm dirs (names and inode numbers
only: a pid reused since the last round has a new /proc directory inode, a file replaced
under its name a new inode) and reads only:

- processes that appeared (all of the above), and in the round after they appeared their
  stat, cmdline and fds again (an engine retitles itself and opens its device after start);
- every round, the stat, cmdline and fds of engine processes and device holders (a zombie,
  a D-state holder, a device opened or closed), and the stat of the children of processes
  that went (they were re-parented: the orphan rule reads their parents);
- shm files that appeared or were replaced (their stat).

Who holds a file is known from the last full look plus what changed. A full holder scan
(every process's fds and maps) runs only when an engine-named file becomes a candidate:
its known holders all went, or it is new and unheld, and it is older than --shm-min-age by
its last stat (then it is stat'ed afresh first); and the whole look, every file's stat
included, is redone every `full_every` rounds (a process that opened a file long after it
started, a process that became a zombie without going, a retitle long after start). A file
the holder scan confirmed as held by nobody is stat'ed afresh every round: it is judged
leaked on that stat, so a write since keeps it, and what is judged is what the cleaner
finds. Nothing is removed on these facts alone: the cleaner re-checks each file and
process before it acts.

Memory is bounded by the host's processes and files: each map is keyed by what exists now.
A host that lists no inode numbers (a snapshot, a recording) is read in full every round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace

from accelhost.containers.cgroup import CgroupContainer
from accelhost.host.base import Host, InodeLister
from accelhost.hygiene.facts.devices import device_paths_held
from accelhost.hygiene.facts.shmstate import ShmState
from accelhost.hygiene.options import HygieneOptions
from accelhost.readers.procs import ProcessInfo, read_process
from accelhost.readers.shmfiles import HeldScan, PidHolds, ReaderRights, ShmFile, held_by

# A process's stat, cmdline and fds are read again in this many rounds after it appeared.
REREAD_ROUNDS = 1
DEFAULT_FULL_EVERY = 10
_NO_HOLDS = PidHolds(frozenset(), frozenset())


@dataclass(frozen=True)
class KnownProcesses:
    """One round's process-side facts, handed to `read_facts` (`processes` None: /proc
    could not be listed)."""

    processes: Mapping[int, ProcessInfo] | None
    device_fds: Mapping[int, tuple[str, ...]]
    hidden: frozenset[int]
    shm_files: Mapping[str, tuple[ShmFile, ...] | None]
    held: HeldScan
    # (pid, start ticks) -> its container by its cgroup: a process stays in its container,
    # so a watch reads each one's /proc/PID/cgroup once (again in each full look)
    cgroups: MutableMapping[tuple[int, int], CgroupContainer | None] = field(default_factory=dict)


@dataclass
class _Proc:
    info: ProcessInfo
    ino: int
    devices: tuple[str, ...]
    holds: PidHolds
    first_round: int
    engine: bool = False  # some engine's frontend or child, by its command line


@dataclass
class RoundCost:
    """What a round read: whether it was a full look, and why a holder scan ran."""

    full: bool = False
    holder_scan: bool = False
    new: int = 0
    gone: int = 0


@dataclass
class IncrementalState:
    options: HygieneOptions
    full_every: int = DEFAULT_FULL_EVERY
    rounds: int = 0
    _procs: dict[int, _Proc] = field(default_factory=dict)
    _hidden: set[int] = field(default_factory=set)
    _force_full: bool = True
    _exited: set[int] = field(default_factory=set)  # told by process events, not yet read
    _cgroups: dict[tuple[int, int], CgroupContainer | None] = field(default_factory=dict)
    last: RoundCost = field(default_factory=RoundCost)
    files: ShmState = field(init=False)
    # when (the facts' clock) the first unheld engine file the last round judged too young
    # reaches --shm-min-age, wherever it lies: also a container's own /dev/shm or a pod's
    # emptyDir, which `files` does not list
    _young_due: float | None = None

    def __post_init__(self) -> None:
        self.files = ShmState(self.options)

    def note_exits(self, pids: Iterable[int]) -> None:
        """Processes the kernel said exited: the next round reads their stat (a zombie
        still listed in /proc holds nothing any more)."""
        self._exited.update(pids)

    def force_full(self) -> None:
        """The next round reads everything (events were lost, a source changed)."""
        self._force_full = True

    def read(self, host: Host, lister: InodeLister | None, now_epoch: float) -> KnownProcesses:
        """One round's process-side facts: only what changed where `lister` tells it."""
        self.rounds += 1
        full = lister is None or self._force_full or self.rounds % self.full_every == 0
        cost = RoundCost(full=full)
        self._force_full = False
        self.files.relist(host, lister, restat=full)
        maps_only = self.files.maps_tokens()
        rights = ReaderRights.of(host)
        if lister is not None:
            pids = lister.list_dir_inodes("/proc")
        else:  # inode 0 for all: a full round compares none
            pids = dict.fromkeys(host.list_dir("/proc") or (), 0)
        listing = {int(n): ino for n, ino in (pids or {}).items() if n.isdigit()}
        before: dict[tuple[int, int], int] = {}
        if full:
            # read every process again, but one known from before is not new (not re-read
            # in the rounds after as if it had just appeared)
            before = {(p, r.info.start_ticks): r.first_round for p, r in self._procs.items()}
            self._procs.clear()
            self._hidden.clear()
            self._cgroups.clear()
        gone = [p for p in self._procs if p not in listing]
        for pid in gone:
            del self._procs[pid]
        self._hidden &= set(listing)
        went = set(gone)
        reparented = {p for p, r in self._procs.items() if r.info.ppid in went} | self._exited
        self._exited = set()
        for pid, ino in listing.items():
            rec = self._procs.get(pid)
            if rec is not None and rec.ino != ino:
                fresh = read_process(host, pid, cmdline=False)
                if fresh is None or fresh.start_ticks != rec.info.start_ticks:
                    del self._procs[pid]  # reused: another process under the same number
                    gone.append(pid)
                    rec = None
                else:
                    rec.ino = ino
            if rec is None:
                if pid not in self._hidden:
                    cost.new += self._read_new(host, pid, ino, rights, maps_only, before)
            elif self._watched(rec):
                self._reread(host, rec, with_fds=True)
            elif pid in reparented:
                self._reread(host, rec, with_fds=False)
        cost.gone = len(gone)
        if not full:
            self.files.restat_confirmed(host)
        # also in a full round: a file is confirmed on its stat of this round, never on
        # one taken before its last write (the cleaner would refuse it as changed, forever)
        candidates = self.files.candidates(host, now_epoch, self._held())
        if full or candidates:
            if not full:
                for rec in self._procs.values():
                    if not (rec.info.is_kernel_thread or rec.info.is_zombie):
                        rec.holds = held_by(
                            host, rec.info.pid, rights, maps_only, listed=self.files.listed
                        )
            cost.holder_scan = True
        held = self._held()  # the round's holders, final from here on
        if cost.holder_scan:
            self.files.confirm(now_epoch, held)
        if lister is not None:
            self.files.read_births(lister, held)
        self.last = cost
        return KnownProcesses(
            processes={pid: rec.info for pid, rec in self._procs.items()} if listing else None,
            device_fds={pid: rec.devices for pid, rec in self._procs.items() if rec.devices},
            hidden=frozenset(self._hidden),
            shm_files=self.files.snapshot(),
            held=held,
            cgroups=self._cgroups,
        )

    def _read_new(
        self,
        host: Host,
        pid: int,
        ino: int,
        rights: ReaderRights,
        maps_only: tuple[str, ...],
        before: Mapping[tuple[int, int], int],
    ) -> int:
        info = read_process(host, pid)
        if info is None:
            if host.stat(f"/proc/{pid}") is not None:
                self._hidden.add(pid)
            return 0
        holds = _NO_HOLDS
        if not (info.is_kernel_thread or info.is_zombie):
            holds = held_by(
                host, pid, rights, maps_only, self.options.is_device_path, self.files.listed
            )
        first = before.get((pid, info.start_ticks), self.rounds)
        self._procs[pid] = _Proc(info, ino, holds.devices, holds, first, self._engine(info))
        return 1

    def _watched(self, rec: _Proc) -> bool:
        """Read again every round: new processes, engine processes, device holders."""
        if rec.info.is_kernel_thread:
            return False
        return self.rounds - rec.first_round <= REREAD_ROUNDS or bool(rec.devices) or rec.engine

    def _engine(self, info: ProcessInfo) -> bool:
        return bool(info.cmdline) and self.options.catalog.is_engine(info.command)

    def _reread(self, host: Host, rec: _Proc, with_fds: bool) -> None:
        """Stat again (re-parented, zombie, D state); with `with_fds` also the cmdline
        (a retitle) and the device nodes open. What it maps is known from its first read
        (a file it takes up later is found by the holder scan that a candidate starts)."""
        info = read_process(host, rec.info.pid, cmdline=with_fds)
        if info is None or info.start_ticks != rec.info.start_ticks:
            return  # gone since the listing: the next round sees it gone
        if not with_fds:
            info = replace(info, cmdline=rec.info.cmdline)
        rec.info = info
        rec.engine = self._engine(info) if with_fds else rec.engine
        if info.is_zombie:
            rec.holds, rec.devices = _NO_HOLDS, ()
        elif with_fds:
            rec.devices = device_paths_held(host, info.pid, self.options)

    def _held(self) -> HeldScan:
        holds = [(pid, rec.holds) for pid, rec in self._procs.items()]
        return HeldScan(
            frozenset().union(*(h.paths for _, h in holds)),
            frozenset().union(*(h.inodes for _, h in holds)),
            # a process /proc shows but will not describe (hidepid) may hold anything
            tuple(sorted([*self._hidden, *(pid for pid, h in holds if h.unreadable)])),
            tuple(sorted(pid for pid, h in holds if h.privileged)),
        )

    def react_pids(self) -> set[int]:
        """The processes whose exit may leave something to judge: engine processes and
        the holders of engine-named shm files (a watch wakes when one exits)."""
        naming_of = self.options.catalog.shm_naming
        named = [f for f in self.files.every() if naming_of(f.name) is not None]
        paths = {f.path for f in named}
        inodes = {(f.dev, f.inode) for f in named}
        return {
            pid
            for pid, rec in self._procs.items()
            if rec.engine
            or not paths.isdisjoint(rec.holds.paths)
            or not inodes.isdisjoint(rec.holds.inodes)
        }

    def note_waiting(self, waits: Iterable[float | None], now_epoch: float | None) -> None:
        """The last round's verdicts' waits (seconds until a file counts as leaked): a
        crashed attempt's files in its pod's emptyDir are judged when they come of age,
        not one --interval later (the kubelet restarts the pod 10 s after a crash)."""
        young = [w for w in waits if w is not None]
        self._young_due = None if now_epoch is None or not young else now_epoch + min(young)

    def next_due(self, now_epoch: float) -> float | None:
        """`ShmState.due`, or sooner when a file the last round judged too young wherever it
        lies comes of age (`note_waiting`)."""
        listed = self.files.due(now_epoch, self._held())
        if self._young_due is None:
            return listed
        young = max(0.0, self._young_due - now_epoch)
        return young if listed is None else min(listed, young)
