"""Why a target named on `clean`'s command line (`--pid`, `--shmid`, `--path`) is not in
its plan: no such process, not an orphan and why, no such segment, not leaked and why.

A named target that matches nothing must never pass in silence: a person who typed a pid
believes it is being cleaned. `unmatched_targets` is pure (facts in, reasons out), so a
dry run and `--yes` give the same answer, and the command exits 1 when the list is not
empty.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from accelhost.hygiene.clean.actions import (
    Action,
    CleanFilters,
    RemoveSegment,
    RemoveShmFile,
    StopProcesses,
)
from accelhost.hygiene.judge.findings import Findings
from accelhost.hygiene.judge.rules import why_not_orphan
from accelhost.hygiene.options import HygieneOptions


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


def _left_out(kind: str, filters: CleanFilters) -> str | None:
    """The --only that leaves a kind of target out, if one does."""
    wanted = {"pid": filters.orphans, "shmid": filters.segments, "path": filters.shm_files}
    return None if wanted[kind] else f"left out by --only (it cleans no {kind} target)"


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
    kinds: tuple[tuple[str, frozenset[Any], set[Any], _Why], ...] = (
        ("pid", filters.pids, stopped, _why_pid),
        ("shmid", filters.shmids, segments, _why_shmid),
        ("path", filters.paths, files, _why_path),
    )
    return [
        Unmatched(kind, t, _left_out(kind, filters) or why(found, options, filters, t))
        for kind, named, planned, why in kinds
        for t in sorted(named - planned)
    ]


__all__ = ["Unmatched", "unmatched_targets"]
