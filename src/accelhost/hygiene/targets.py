"""Why a target named on `clean`'s command line (`--pid`, `--shmid`, `--path`) is not in
its plan: no such process, not an orphan and why, no such segment, not leaked and why.

A named target that matches nothing must never pass in silence: a person who typed a pid
believes it is being cleaned. `unmatched_targets` is pure (facts in, reasons out), so a
dry run and `--yes` give the same answer, and the command exits 1 when the list is not
empty.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelhost.hygiene.actions import (
    Action,
    CleanFilters,
    RemoveSegment,
    RemoveShmFile,
    StopProcesses,
)
from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.posix_check import judge_shm_files
from accelhost.hygiene.rules import judge_segment, why_not_orphan


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


def _left_out(kind: str, filters: CleanFilters) -> str | None:
    """The --only that leaves a kind of target out, if one does."""
    wanted = {"pid": filters.orphans, "shmid": filters.segments, "path": filters.shm_files}
    return None if wanted[kind] else f"left out by --only (it cleans no {kind} target)"


def _pid_reasons(
    facts: HostFacts, options: HygieneOptions, filters: CleanFilters, planned: set[int]
) -> list[Unmatched]:
    out = []
    for pid in sorted(filters.pids - planned):
        why = _left_out("pid", filters)
        if why is None:
            if facts.processes is None:
                why = "cannot tell: " + facts.errors.get("processes", "processes not read")
            elif pid not in facts.processes and pid in facts.hidden_pids:
                why = "cannot tell: /proc will not describe it to this user (hidepid)"
            elif pid not in facts.processes and facts.processes_partial is not None:
                why = f"not seen: {facts.processes_partial}"
            else:
                why = why_not_orphan(facts.processes, facts.self_pid, options, pid)
        out.append(Unmatched("pid", pid, why))
    return out


def _shmid_reasons(
    facts: HostFacts, options: HygieneOptions, filters: CleanFilters, planned: set[int]
) -> list[Unmatched]:
    segs = {s.shmid: s for s in facts.segments or ()}
    out = []
    for shmid in sorted(filters.shmids - planned):
        why = _left_out("shmid", filters)
        seg = segs.get(shmid)
        if why is not None:
            pass
        elif facts.segments is None or facts.processes is None:
            why = "cannot tell: " + facts.errors.get("segments", "segment table not read")
        elif seg is None:
            why = "no such segment"
        elif filters.owners and seg.uid not in filters.owners:
            why = f"left out by --owner (its owner is uid {seg.uid})"
        elif filters.keys and (seg.key & 0xFFFFFFFF) not in filters.keys:
            why = f"left out by --key (its key is {seg.key_hex})"
        else:
            verdict = judge_segment(seg, facts.alive, facts.now_epoch, options.shm_min_age_s)
            why = f"not leaked: {verdict.reason}"
        out.append(Unmatched("shmid", shmid, why))
    return out


def _path_reasons(
    facts: HostFacts, options: HygieneOptions, filters: CleanFilters, planned: set[str]
) -> list[Unmatched]:
    judged = {j.file.path: j for j in judge_shm_files(facts, options)}
    out = []
    for path in sorted(filters.paths - planned):
        why = _left_out("path", filters)
        j = judged.get(path)
        parent = os.path.dirname(path)
        dirs = {os.path.abspath(d): files for d, files in facts.shm_files.items()}
        if why is not None:
            pass
        elif parent not in dirs:
            shown = ", ".join(facts.shm_files) or "none"
            why = f"not in a shared-memory directory ({shown}; add one with --shm-dir)"
        elif dirs[parent] is None or facts.shm_held is None:
            why = f"cannot tell: {parent} or the processes' open files not read"
        elif j is None:
            why = "no such file"
        elif filters.owners and j.file.uid not in filters.owners:
            why = f"left out by --owner (its owner is {j.file.owner})"
        elif j.blocked or j.unclaimed:
            why = j.reason
        else:
            why = f"not leaked: {j.reason}"
        out.append(Unmatched("path", path, why))
    return out


def unmatched_targets(
    facts: HostFacts, options: HygieneOptions, filters: CleanFilters, actions: Sequence[Action]
) -> list[Unmatched]:
    """Each named pid, shmid and path the plan leaves alone, with the reason."""
    pids = {t.pid for a in actions if isinstance(a, StopProcesses) for t in a.targets}
    shmids = {a.shmid for a in actions if isinstance(a, RemoveSegment)}
    paths = {a.path for a in actions if isinstance(a, RemoveShmFile)}
    return [
        *_pid_reasons(facts, options, filters, pids),
        *_shmid_reasons(facts, options, filters, shmids),
        *_path_reasons(facts, options, filters, paths),
    ]


__all__ = ["Unmatched", "unmatched_targets"]
