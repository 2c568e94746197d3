"""What the cleaner may do, as plain values: a dry run prints them, `--yes` does them.

The JSON of each action uses the doctor's keys for the same facts (`doctor.evidence`).

A target named on the command line (`--pid`, `--shmid`, `--path`) that matches nothing
must never pass in silence: a person who typed a pid believes it is being cleaned.
`unmatched_targets` says why each is not in the plan; it is pure (facts in, reasons out),
so a dry run and `--yes` give the same answer, and the command exits 1 when any is left.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from accelhost.formats import human_bytes
from accelhost.hygiene.judge.findings import Findings
from accelhost.hygiene.judge.rules import why_not_orphan
from accelhost.hygiene.options import HygieneOptions
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.shmfiles import ShmFile


@dataclass(frozen=True)
class ProcessRef:
    """A process as it was when planned: pid plus start time, to refuse a reused pid."""

    pid: int
    start_ticks: int
    state: str
    cmdline: str


@dataclass(frozen=True)
class StopProcesses:
    """SIGTERM, wait, SIGKILL, wait: one orphan's group (or lone orphan) and its descendants."""

    pgid: int
    signal_group: bool
    targets: tuple[ProcessRef, ...]
    reason: str
    kind: str = "stop"

    def describe(self) -> str:
        pids = " ".join(str(t.pid) for t in self.targets)
        how = f"group {self.pgid} and pids {pids}" if self.signal_group else f"pids {pids}"
        return f"stop {how}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pgid": self.pgid,
            "signal_group": self.signal_group,
            "pids": [t.pid for t in self.targets],
            "targets": [asdict(t) for t in self.targets],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class RemoveSegment:
    """`shmctl(IPC_RMID)` of one shmid, if it still passes the leak rule when we get there.

    `seg` is the segment as the plan saw it (the re-check compares the table with it).
    `after_stop` segments belong to processes this plan stops: judged once they are gone,
    without the idle grace (we know why they are idle).
    """

    seg: ShmSegment
    reason: str
    after_stop: bool = False
    kind: str = "remove_segment"

    @property
    def shmid(self) -> int:
        return self.seg.shmid

    def describe(self) -> str:
        when = " (once its processes are stopped, if then unattached)" if self.after_stop else ""
        return (
            f"remove segment shmid {self.shmid} (key {self.seg.key_hex}, "
            f"{human_bytes(self.seg.size)}, creator {self.seg.cpid}){when}: {self.reason}"
        )

    def intent(self, now: ShmSegment, why: str) -> dict[str, Any]:
        """The journal's intent line: the segment as the table shows it just before."""
        return {**_segment_facts(now), "reason": why}

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **_segment_facts(self.seg),
            "last_pid": self.seg.lpid,
            "ctime": self.seg.ctime,
            "after_stop": self.after_stop,
            "reason": self.reason,
        }


def _segment_facts(seg: ShmSegment) -> dict[str, Any]:
    return {"shmid": seg.shmid, "key": seg.key_hex, "bytes": seg.size, "creator_pid": seg.cpid}


@dataclass(frozen=True)
class RemoveShmFile:
    """`unlink` of one POSIX shared-memory file, if it is still the same file (device,
    inode, mtime) and still held by nobody when we get there. `file` is the file as the
    plan saw it."""

    file: ShmFile
    naming: str | None
    reason: str
    kind: str = "remove_shm_file"

    @property
    def path(self) -> str:
        return self.file.path

    def describe(self) -> str:
        used = human_bytes(self.file.used_bytes)
        return f"remove {self.path} ({used} used, {self.file.owner}): {self.reason}"

    def intent(self, _fresh: ShmFile, why: str) -> dict[str, Any]:
        """The journal's intent line: the plan's facts of the file, and why it goes."""
        planned = self.to_dict()
        return {k: planned[k] for k in ("path", "used_bytes", "owner", "naming")} | {"reason": why}

    def to_dict(self) -> dict[str, Any]:
        f = self.file
        return {
            "kind": self.kind,
            "path": f.path,
            "used_bytes": f.used_bytes,
            "size_bytes": f.size_bytes,
            "owner": f.owner,
            "uid": f.uid,
            "naming": self.naming,
            "reason": self.reason,
        }


Action = StopProcesses | RemoveSegment | RemoveShmFile


@dataclass(frozen=True)
class CleanFilters:
    """Narrow the plan: only these pids / shmids / segment owners / keys / paths (empty = all)."""

    pids: frozenset[int] = frozenset()
    shmids: frozenset[int] = frozenset()
    owners: frozenset[int] = frozenset()
    keys: frozenset[int] = frozenset()
    paths: frozenset[str] = frozenset()
    orphans: bool = True
    segments: bool = True
    shm_files: bool = True

    def takes_segment(self, seg: ShmSegment) -> bool:
        """Whether the shmid, owner and key filters let `seg` in."""
        return (
            (not self.shmids or seg.shmid in self.shmids)
            and (not self.owners or seg.uid in self.owners)
            and (not self.keys or (seg.key & 0xFFFFFFFF) in self.keys)
        )

    def takes_file(self, f: ShmFile) -> bool:
        """Whether the path and owner filters let `f` in."""
        return (not self.paths or f.path in self.paths) and (
            not self.owners or f.uid in self.owners
        )


@dataclass
class Outcome:
    action: str
    target: str
    result: str
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CleanResult:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)


@dataclass(frozen=True)
class Unmatched:
    """One named target the plan does not act on, and why."""

    kind: str  # "pid", "shmid" or "path"
    target: int | str
    reason: str

    @property
    def line(self) -> str:
        return f"{self.kind} {self.target}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "target": self.target, "reason": self.reason}


_Why = Callable[[Findings, HygieneOptions, CleanFilters, Any], str]


def _why_pid(found: Findings, options: HygieneOptions, filters: CleanFilters, pid: int) -> str:
    facts = found.facts
    if facts.processes is None:
        return "cannot tell: " + facts.errors.get("processes", "processes not read")
    if pid not in facts.processes and pid in facts.hidden_pids:
        return "cannot tell: /proc will not describe it to this user (hidepid)"
    if pid not in facts.processes and facts.processes_partial is not None:
        return f"not seen: {facts.processes_partial}"
    return why_not_orphan(facts.processes, facts.self_pid, options, pid)


def _why_shmid(found: Findings, options: HygieneOptions, filters: CleanFilters, shmid: int) -> str:
    if found.segments is None:
        return "cannot tell: " + found.facts.errors.get("segments", "segment table not read")
    judged = next((p for p in found.segments if p[0].shmid == shmid), None)
    if judged is None:
        return "no such segment"
    seg, verdict = judged
    if filters.owners and seg.uid not in filters.owners:
        return f"left out by --owner (its owner is uid {seg.uid})"
    if filters.keys and (seg.key & 0xFFFFFFFF) not in filters.keys:
        return f"left out by --key (its key is {seg.key_hex})"
    return f"not leaked: {verdict.reason}"


def _why_path(found: Findings, options: HygieneOptions, filters: CleanFilters, path: str) -> str:
    facts = found.facts
    parent = os.path.dirname(path)
    dirs = {os.path.abspath(d): files for d, files in facts.shm_files.items()}
    if parent not in dirs:
        shown = ", ".join(facts.shm_files) or "none"
        return f"not in a shared-memory directory ({shown}; add one with --shm-dir)"
    if dirs[parent] is None or facts.shm_held is None:
        return f"cannot tell: {parent} or the processes' open files not read"
    j = next((v for v in found.shm or () if v.file.path == path), None)
    if j is None:
        return "no such file"
    if filters.owners and j.file.uid not in filters.owners:
        return f"left out by --owner (its owner is {j.file.owner})"
    if j.blocked or j.unclaimed:
        return j.reason
    return f"not leaked: {j.reason}"


def unmatched_targets(
    found: Findings, options: HygieneOptions, filters: CleanFilters, actions: Sequence[Action]
) -> list[Unmatched]:
    """Each named pid, shmid and path the plan leaves alone, with the reason (`found`: what
    the plan was made of)."""
    stopped = {t.pid for a in actions if isinstance(a, StopProcesses) for t in a.targets}
    segments = {a.shmid for a in actions if isinstance(a, RemoveSegment)}
    files = {a.path for a in actions if isinstance(a, RemoveShmFile)}
    # each kind: what was named, what the plan does, whether --only keeps the kind, why not
    kinds: tuple[tuple[str, frozenset[Any], set[Any], bool, _Why], ...] = (
        ("pid", filters.pids, stopped, filters.orphans, _why_pid),
        ("shmid", filters.shmids, segments, filters.segments, _why_shmid),
        ("path", filters.paths, files, filters.shm_files, _why_path),
    )
    only = "left out by --only (it cleans no {} target)"
    return [
        Unmatched(kind, t, why(found, options, filters, t) if wanted else only.format(kind))
        for kind, named, planned, wanted, why in kinds
        for t in sorted(named - planned)
    ]
