"""System V shared memory that the supervised tree created and left behind.

Exiting processes do not remove their segments, and a leaked one keeps HugePages and
device memory. After the teardown we remove exactly the segments that are new since the
start, were created by a pid of the tree (exact with process events, else the pids seen
or reaped) that no process outside it got afterwards and no live process holds now, and
that nobody attaches (nor used last and lives on). Without process events a short-lived
creator may go unseen; `clean` removes such a leak.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from accelhost.host.base import Host
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.sysv import read_segments
from accelhost.remove.shm import ipc_rmid, remove_segment
from accelhost.supervisor.options import RemovedSegment


@dataclass
class SegmentLedger:
    before: frozenset[int]  # shmids present when the supervisor started
    creators: set[int] = field(default_factory=set)  # every pid known to be of the tree
    ambiguous: set[int] = field(default_factory=set)  # tree pids reused outside the tree

    @classmethod
    def start(cls, host: Host) -> SegmentLedger:
        segments = read_segments(host) or []
        return cls(before=frozenset(s.shmid for s in segments))

    def note(self, pids: Iterable[int]) -> None:
        self.creators.update(pids)

    def absorb(self, members: Iterable[int], ambiguous: Iterable[int]) -> None:
        """Take in what the process events saw: every member, and the reused pids."""
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
