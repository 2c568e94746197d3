"""Every finding named by its container, and `--container` scoping: in the report's JSON a
process carries `container` (null on the host), a leftover `left_by` (typed `LeftBy` until
the JSON is made here)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from accelhost.containers.model import Container
from accelhost.errors import UsageError
from accelhost.hygiene.clean.actions import Action, RemoveShmFile, StopProcesses
from accelhost.hygiene.judge.attribution import Attribution, Inode, LeftBy, container_json
from accelhost.hygiene.judge.findings import Findings
from accelhost.hygiene.judge.rules import LeakVerdict, Orphan, ShmVerdict
from accelhost.hygiene.report import OK, CheckResult, DoctorReport
from accelhost.parsers.sysvipc import ShmSegment

Orphans = tuple[Orphan, ...]
Leaks = list[tuple[ShmSegment, LeakVerdict]]


def _annotate(
    e: dict[str, Any], att: Attribution, ctimes: Mapping[int, int]
) -> tuple[dict[str, Any], set[str]]:
    """The evidence item named by its container, and the ids of the containers it names."""
    kind = e.get("kind")
    who: LeftBy | None = None
    if kind == "process" and isinstance(e.get("pid"), int) and "container" not in e:
        c = att.container_of(e["pid"])
        return {**e, "container": container_json(c)}, set() if c is None else {c.id}
    if kind == "shm_file" and "left_by" not in e:
        who = att.left_file(str(e.get("path")))
        e = {**e, "left_by": who and who.to_dict()}
    elif kind == "segment" and "left_by" not in e and isinstance(e.get("shmid"), int):
        who = att.left_at(ctimes.get(e["shmid"]))
        e = {**e, "left_by": who and who.to_dict()}
    own = e.get("container")  # the check's own (container_init's)
    ids = {own["id"]} if isinstance(own, dict) and own.get("id") else set()
    return e, ids | {c.id for c in (who.containers if who else ())}


def annotate_report(
    report: DoctorReport, att: Attribution, chosen: Sequence[Container] | None = None
) -> DoctorReport:
    """Every process and leftover of every check named by its container; with `chosen`,
    only what those containers left or run: a check with findings elsewhere only says so
    and is OK for them."""
    ctimes = {s.shmid: s.ctime for s in att.facts.segments or ()}
    ids = {c.id for c in chosen or ()}
    label = ", ".join(c.label for c in chosen or ())
    out = []
    for c in report.checks:
        named = [_annotate(e, att, ctimes) for e in c.evidence]
        if chosen is None or not c.evidence:
            out.append(replace(c, evidence=tuple(e for e, _ in named)) if named else c)
            continue
        kept = tuple(e for e, whose in named if whose & ids)
        if kept:
            mine = f"{label}: {len(kept)} of {len(c.evidence)} item(s)"
            out.append(replace(c, summary=f"{mine}; on the whole host: {c.summary}", evidence=kept))
        else:
            other = len(c.evidence)
            out.append(CheckResult(c.name, OK, f"nothing of {label} ({other} item(s) elsewhere)"))
    return DoctorReport(tuple(out))


def containers_named(evidence: Sequence[dict[str, Any]]) -> list[str]:
    """The labels of the containers a check's evidence names, once each, in order (read
    from the report's JSON, as the watch's log says it)."""
    out: dict[str, None] = {}
    for e in evidence:
        left = e.get("left_by")
        found = [e.get("container"), *(left["containers"] if isinstance(left, dict) else [])]
        out.update((str(x["label"]), None) for x in found if isinstance(x, dict) and x.get("label"))
    return list(out)


def whose_action(att: Attribution, a: Action) -> LeftBy | None:
    """The container of the processes an action stops (only when every one runs in that
    container), or of the leftover it removes."""
    if isinstance(a, StopProcesses):
        found = {att.container_of(t.pid) for t in a.targets}
        c = found.pop() if len(found) == 1 else None
        return None if c is None else LeftBy.of([c], f"runs in {c.label}", "")
    if isinstance(a, RemoveShmFile):
        return att.left_file(a.path)
    return att.left_at(a.seg.ctime)


def scope_actions(
    actions: Sequence[Action], att: Attribution, chosen: Sequence[Container]
) -> list[Action]:
    """The actions one of `chosen` alone left or runs (`LeftBy.only`)."""
    ids = {c.id for c in chosen}
    return [a for a in actions if (w := whose_action(att, a)) is not None and w.only(ids)]


@dataclass
class HolderMemory:
    """What `watch` remembers between rounds: which container's processes held each
    /dev/shm file, so a file left when that container went is named by it (only files
    still listed, at most `limit`)."""

    limit: int = 10000
    seen: dict[Inode, Container] = field(default_factory=dict)

    def remember(self, att: Attribution) -> None:
        cf = att.facts.containers
        if cf is None:
            return
        listed = {(f.dev, f.inode) for f in att.listed.values()}
        kept = {k: c for k, c in self.seen.items() if k in listed}
        for node, cid in cf.held_by.items():
            if node in listed and cid in att.view.containers:
                kept[node] = att.view.containers[cid]
        self.seen = dict(list(kept.items())[-self.limit :])


@dataclass
class ContainerScope:
    """`watch --container NAME|ID`: the containers it names, resolved each round. Once
    resolved, a container that went (`docker rm -f`) keeps the containers it last named, and
    the IPC mode read of it (`ipc_modes`, for the next round's `Attribution`), so what it
    left is still its own; a name that never named one is a UsageError."""

    wanted: str
    chosen: list[Container] | None = None
    ipc_modes: dict[str, str] = field(default_factory=dict)

    def resolve(self, att: Attribution) -> list[Container]:
        """The chosen containers for this round's `att` (made knowing `ipc_modes`)."""
        try:
            self.chosen = att.resolve(self.wanted)
        except UsageError:
            if self.chosen is None:
                raise
        self.ipc_modes = {c.id: c.ipc_mode for c in self.chosen if c.ipc_mode}
        return self.chosen

    def narrow(
        self, found: Findings
    ) -> tuple[Orphans | None, Leaks | None, list[ShmVerdict] | None]:
        """Of the round's findings (after `resolve`), what the chosen containers run or
        alone left."""
        att, ids = found.attribution, {c.id for c in self.chosen or ()}

        def runs(pid: int) -> bool:
            c = att.container_of(pid)
            return c is not None and c.id in ids

        def left(who: LeftBy | None) -> bool:
            return who is not None and who.only(ids)

        orphans, leaks, shm = found.orphans, found.leaks, found.leaked_files
        return (
            None if orphans is None else tuple(o for o in orphans if runs(o.proc.pid)),
            None if leaks is None else [(s, v) for s, v in leaks if left(att.left_at(s.ctime))],
            None if shm is None else [j for j in shm if left(att.left_file(j.file.path))],
        )
