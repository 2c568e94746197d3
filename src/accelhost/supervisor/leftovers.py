"""What the tree may leave behind besides processes, fed the pids the supervisor sees and
made exact by process events (`tree`). With `--private-ipc` there is nothing to
attribute: the kernel frees the tree's namespaces.

System V segments: exiting processes do not remove them, and a leaked one keeps HugePages
and device memory. After the teardown we remove exactly the segments that are new since
the start, were created by a pid of the tree (exact with process events, else the pids
seen or reaped) that no process outside it got afterwards and no live process holds now,
and that nobody attaches (nor used last and lives on). Without process events a
short-lived creator may go unseen; `clean` removes such a leak.

/dev/shm files: a graceful stop unlinks vLLM's `psm_*` and `sem.mp-*`; a SIGKILL leaves
them. A file carries no creator pid, so `run` removes exactly the files that are new since
the start (by device and inode), were seen held by a live process of the tree (looked at
on each creation, through inotify, and when the teardown begins), and nobody holds at the
end.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from accelhost.host.base import Host
from accelhost.kernel.inotify import CreationWatch
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.procs import list_pids
from accelhost.readers.shmfiles import list_shm_files, scan_held, stat_shm_file
from accelhost.readers.sysv import read_segments
from accelhost.remove.shm import ipc_rmid, remove_segment, unlink_shm_file
from accelhost.supervisor.options import RemovedFile, RemovedSegment, RunOutcome, SupervisorOptions
from accelhost.supervisor.tree import ForkTracker

Inode = tuple[int, int]  # (st_dev, st_ino)
Scan = Callable[[], Iterable[int]]


@dataclass
class SegmentLedger:
    before: frozenset[int]  # shmids present when the supervisor started
    creators: set[int] = field(default_factory=set)  # every pid known to be of the tree
    ambiguous: set[int] = field(default_factory=set)  # tree pids reused outside the tree

    @classmethod
    def start(cls, host: Host) -> SegmentLedger:
        return cls(before=frozenset(s.shmid for s in read_segments(host) or []))

    def absorb(self, members: Iterable[int], ambiguous: Iterable[int] = ()) -> None:
        """Take in pids of the tree (seen, reaped, or every member the process events saw),
        and the reused ones."""
        self.creators.update(members)
        self.ambiguous.update(ambiguous)

    def ours(self, seg: ShmSegment) -> bool:
        return (
            seg.shmid not in self.before
            and seg.cpid in self.creators
            and seg.cpid not in self.ambiguous
        )

    def now(self, host: Host) -> list[ShmSegment]:
        return [
            s
            for s in read_segments(host) or []
            if s.shmid not in self.before and not s.marked_for_destruction
        ]


def remove_leaked(
    host: Host,
    ledger: SegmentLedger,
    log: Callable[[str], None],
    remove: Callable[[int], None] = ipc_rmid,
) -> list[RemovedSegment]:
    """Remove the leaked segments, each re-checked by `accelhost.remove` against a fresh
    read of the table just before its removal (a segment attached in between is kept)."""

    def rule(seg: ShmSegment) -> tuple[bool, str]:
        if seg.nattch != 0 or not ledger.ours(seg):
            return False, ""  # attached meanwhile (reported below), or not ours
        if host.read_file(f"/proc/{seg.cpid}/stat") is not None:
            # The tree is gone, yet a process has the creator's pid: reused, or one that
            # survived SIGKILL. Either way not provably a leftover of ours.
            return False, f"its creator pid {seg.cpid} belongs to a live process"
        if seg.lpid > 0 and host.read_file(f"/proc/{seg.lpid}/stat") is not None:
            # The tree is gone: a live last user is another program's (as the doctor's rule).
            return False, f"its last user pid {seg.lpid} is alive"
        return True, ""

    removed: list[RemovedSegment] = []
    for seg in [s for s in ledger.now(host) if ledger.ours(s) and s.nattch == 0]:
        what = f"shared memory shmid {seg.shmid} key {seg.key_hex}"
        done = remove_segment(host, seg.shmid, rule, rmid=remove)
        if done.status == "kept" and done.why:
            log(f"kept {what}: {done.why}")
        elif done.status == "failed":
            log(f"could not remove shared memory shmid {seg.shmid} ({seg.key_hex}): {done.why}")
        elif done.status == "removed":
            removed.append(RemovedSegment(seg.shmid, seg.key_hex, seg.size, seg.cpid))
            log(f"removed {what} ({seg.size} bytes) left by pid {seg.cpid}")
    for seg in ledger.now(host):  # what is left, kept: why
        made = f"kept shared memory shmid {seg.shmid} key {seg.key_hex} made by pid {seg.cpid}"
        if ledger.ours(seg) and seg.nattch > 0:
            log(f"{made}: still attached by {seg.nattch} process(es) outside the tree")
        elif seg.cpid in ledger.ambiguous and seg.nattch == 0:
            log(
                f"{made}: that pid was also a process outside the tree during the run (the "
                "pid counter wrapped): whose it is cannot be told (`accelhost doctor` judges it)"
            )
    return removed


@dataclass
class ShmFileLedger:
    dirs: Sequence[str]
    before: frozenset[Inode]
    held_by_tree: set[Inode] = field(default_factory=set)

    @classmethod
    def start(cls, host: Host, dirs: Sequence[str]) -> ShmFileLedger:
        listing = list_shm_files(host, dirs).values()
        return cls(dirs, frozenset((f.dev, f.inode) for found in listing for f in found or []))

    def unknown(self, paths: Iterable[str]) -> bool:
        """Some of these files exist, are new, and are not known to be the tree's yet."""
        found = (stat_shm_file(path) for path in paths)
        keys = ((f.dev, f.inode) for f in found if f is not None)
        return any(k not in self.before and k not in self.held_by_tree for k in keys)

    def observe(self, host: Host, pids: Iterable[int]) -> None:
        """Note the files these live members of the tree hold now (of a member in another
        mount namespace, only mapped inodes: its paths name another /dev/shm)."""
        mine = host.read_link("/proc/self/ns/mnt")
        same: list[int] = []
        other: list[int] = []
        for pid in pids:
            (same if host.read_link(f"/proc/{pid}/ns/mnt") == mine else other).append(pid)
        prefixes = tuple(d.rstrip("/") + "/" for d in self.dirs)
        if same:
            scan = scan_held(host, same)
            self.held_by_tree |= scan.inodes
            named = (stat_shm_file(path) for path in scan.paths if path.startswith(prefixes))
            self.held_by_tree.update((f.dev, f.inode) for f in named if f is not None)
        if other:
            self.held_by_tree |= scan_held(host, other).inodes


_HELD = {"held": "still held by a live process", "unreadable": "cannot tell who holds it"}


def remove_left_files(
    host: Host, ledger: ShmFileLedger, log: Callable[[str], None]
) -> list[RemovedFile]:
    """Unlink the tree's files that nobody holds any more, each re-checked by
    `accelhost.remove` just before (same inode, held by nobody)."""
    removed: list[RemovedFile] = []
    kept_new = 0
    for found in list_shm_files(host, ledger.dirs).values():
        for f in found or []:
            key = (f.dev, f.inode)
            if key in ledger.before:
                continue
            if key not in ledger.held_by_tree:
                kept_new += 1
                continue
            done = unlink_shm_file(host, f.path, f.dev, f.inode)
            if done.status in _HELD:
                log(f"kept {f.path}: {_HELD[done.status]}")
            elif done.status == "failed":
                log(f"could not remove {f.path}: {done.why}")
            elif done.status == "removed":
                removed.append(RemovedFile(f.path, done.freed_bytes))
                log(f"removed {f.path} ({done.freed_bytes} bytes used) left by the tree")
    if kept_new:
        log(
            f"kept {kept_new} new file(s) under {', '.join(ledger.dirs)}: "
            "no process of the tree held them"
        )
    return removed


@dataclass
class Leftovers:
    host: Host
    segments: SegmentLedger | None = None
    files: ShmFileLedger | None = None
    tracker: ForkTracker | None = None
    creations: CreationWatch | None = None
    # the live tree's pids by a /proc scan, where there are no process events
    scan: Scan | None = None

    @classmethod
    def start(cls, host: Host, root: int, opts: SupervisorOptions, scan: Scan) -> Leftovers:
        """Record what exists before the command starts (call before spawning it)."""
        if not opts.clean_shm or opts.private_ipc:
            return cls(host)
        tracker = ForkTracker.open(root, list_pids(host)) if opts.track_forks else None
        if opts.track_forks and tracker is None:
            opts.log(
                "no process events here (they need root in the host's PID namespace): a "
                "segment of a process that exits unseen cannot be attributed; "
                "--private-ipc frees them all"
            )
        files = ShmFileLedger.start(host, opts.shm_dirs) if opts.shm_dirs else None
        left = cls(host, SegmentLedger.start(host), files, tracker, None, scan)
        if files is not None:
            with contextlib.suppress(OSError):  # no inotify: only the teardown's look counts
                left.creations = CreationWatch.open(opts.shm_dirs)
        return left

    def sources(self) -> list[tuple[int, Callable[[], None]]]:
        out: list[tuple[int, Callable[[], None]]] = []
        if self.tracker is not None:
            out.append((self.tracker.events.fileno(), self.tracker.drain))
        if self.creations is not None:
            out.append((self.creations.fileno(), self._created))
        return out

    def _created(self) -> None:
        """Files appeared in /dev/shm: see which of them the tree holds while it does."""
        if self.creations is None or self.files is None:
            return
        paths = self.creations.read()  # None: the queue overflowed, some names are unknown
        if paths is not None and not self.files.unknown(paths):
            return  # gone already (a semaphore's name), or known
        if self.tracker is not None and not self.tracker.lost:
            self.tracker.drain()
            self.observe(self.tracker.live - self.tracker.ambiguous)
        elif self.scan is not None:
            self.observe(self.scan())

    def note(self, pids: Iterable[int]) -> None:
        if self.segments is not None:
            self.segments.absorb(pids)

    def observe(self, pids: Iterable[int]) -> None:
        """The live tree as the teardown begins: which /dev/shm files it holds."""
        if self.files is not None:
            self.files.observe(self.host, pids)

    def finish(self, outcome: RunOutcome, log: Callable[[str], None]) -> None:
        """After the teardown: remove what is provably the tree's and nobody uses."""
        if self.segments is not None and self.tracker is not None:
            self.tracker.drain()
            if self.tracker.lost:
                # A lost exit and fork could hide a reused pid: trust only what was seen.
                log(
                    "process events were lost (a fork storm, or a fork that raced the "
                    "kernel's event filter): only segments of processes seen in the tree "
                    "are removed"
                )
            else:
                self.segments.absorb(self.tracker.members, self.tracker.ambiguous)
        if self.segments is not None:
            outcome.removed_segments = remove_leaked(self.host, self.segments, log)
        if self.files is not None:
            outcome.removed_files = remove_left_files(self.host, self.files, log)

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None
        if self.creations is not None:
            self.creations.close()
            self.creations = None
