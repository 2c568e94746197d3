"""Every finding named by its container: evidence annotation and `--container` scoping.

A process carries `container` (null on the host); a leftover carries `left_by`: the
container whose own /dev/shm holds it, or the stopped one(s) whose lifetime covers its
birth (`ambiguous` when more than one), never a guess beyond that. `scope_report` /
`scope_actions` keep what one container left (`doctor`/`clean --container`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from accelhost.containers.model import RUNNING, Container
from accelhost.errors import UsageError
from accelhost.hygiene.actions import Action, RemoveShmFile, StopProcesses
from accelhost.hygiene.engines import build_catalog
from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.report import OK, CheckResult, DoctorReport
from accelhost.readers.shmfiles import ShmFile

# A leftover born this close outside a container's lifetime is still its (clocks of the
# runtime and the kernel differ by a little, and a file is made just after a start).
LIFETIME_SLACK_S = 2.0
_PRIVATE_IPC = ("private", "none", "shareable")


def container_json(c: Container | None) -> dict[str, Any] | None:
    return None if c is None else {"label": c.label, **c.to_dict()}


def container_of(facts: HostFacts, pid: int) -> Container | None:
    cf = facts.containers
    return None if cf is None else cf.view.of_pid(pid)


def left_by_birth(facts: HostFacts, born: float | None) -> dict[str, Any] | None:
    """The stopped containers whose lifetime covers `born` (host /dev/shm, SysV)."""
    cf = facts.containers
    if cf is None or born is None:
        return None
    found = [
        c
        for c in cf.view.containers.values()
        if c.state != RUNNING
        and c.started is not None
        and c.started - LIFETIME_SLACK_S <= born
        and (c.finished is None or born <= c.finished + LIFETIME_SLACK_S)
        and c.ipc_mode not in _PRIVATE_IPC  # it could write the host's /dev/shm
        and c.shares_host_ipc is not False
    ]
    if not found:
        return None
    found.sort(key=lambda c: (c.started or 0.0, c.id))
    names = " and ".join(c.label for c in found)
    gone = "it no longer runs" if len(found) == 1 else "none of them runs now"
    return _named(found, f"born while {names} ran; {gone}", "candidates")


def _named(found: list[Container], why: str, what: str) -> dict[str, Any]:
    """`left_by`: the containers, whether there is more than one, and why they are named."""
    if len(found) > 1:
        why += f": {len(found)} {what}, cannot tell which"
    return {
        "containers": [container_json(c) for c in found],
        "ambiguous": len(found) > 1,
        "why": why,
    }


def left_by_dir(facts: HostFacts, path: str) -> dict[str, Any] | None:
    """The containers whose own /dev/shm holds `path`."""
    cf = facts.containers
    if cf is None:
        return None
    d = next((d for d in cf.shm_dirs if path.startswith(d.path + "/")), None)
    if d is None:
        return None
    found = [cf.view.containers[i] for i in d.container_ids if i in cf.view.containers]
    is_engine = build_catalog().is_engine
    chosen = [c for c in found if runs_engine(facts, c, is_engine)] or found
    why = "in the /dev/shm of " + " and ".join(c.label for c in chosen)
    return _named(chosen, why, "containers share it")


def runs_engine(facts: HostFacts, c: Container, is_engine: Callable[[str], bool]) -> bool:
    cf = facts.containers
    procs = facts.processes or {}
    pids = cf.view.pids_of(c.id) if cf else []
    return any(p in procs and is_engine(procs[p].command) for p in pids)


def left_by_seen(facts: HostFacts, f: ShmFile | None) -> dict[str, Any] | None:
    """The container whose processes an earlier look (a `watch` round) saw holding it."""
    cf = facts.containers
    c = cf.seen_holders.get((f.dev, f.inode)) if cf and f and f.inode else None
    if c is None:
        return None
    return _named([c], f"its processes were seen holding it ({c.label})", "")


def left_by_file(
    facts: HostFacts, path: str, listed: Mapping[str, ShmFile] | None = None
) -> dict[str, Any] | None:
    """`listed`: `listed_by_path(facts)`, when many files are asked about."""
    f = (listed if listed is not None else listed_by_path(facts)).get(path)
    born = None if f is None else (f.birth if f.birth is not None else f.mtime)
    return left_by_dir(facts, path) or left_by_seen(facts, f) or left_by_birth(facts, born)


def listed_by_path(facts: HostFacts) -> dict[str, ShmFile]:
    """Every /dev/shm file listed, the host's and the containers' own, by path."""
    own = [d.files for d in facts.containers.shm_dirs] if facts.containers else []
    dirs = [*facts.shm_files.values(), *own]
    return {f.path: f for files in dirs for f in files or ()}


def annotate_evidence(
    e: dict[str, Any], facts: HostFacts, listed: Mapping[str, ShmFile] | None = None
) -> dict[str, Any]:
    kind = e.get("kind")
    if kind == "process" and isinstance(e.get("pid"), int) and "container" not in e:
        return {**e, "container": container_json(container_of(facts, e["pid"]))}
    if kind == "shm_file" and "left_by" not in e:
        return {**e, "left_by": left_by_file(facts, str(e.get("path")), listed)}
    if kind == "segment" and "left_by" not in e and isinstance(e.get("shmid"), int):
        seg = next((s for s in facts.segments or () if s.shmid == e["shmid"]), None)
        return {**e, "left_by": left_by_birth(facts, None if seg is None else float(seg.ctime))}
    return e


def annotate_report(report: DoctorReport, facts: HostFacts) -> DoctorReport:
    """Every process and leftover of every check, named by its container."""
    listed = listed_by_path(facts)
    return DoctorReport(
        tuple(
            replace(c, evidence=tuple(annotate_evidence(e, facts, listed) for e in c.evidence))
            for c in report.checks
        )
    )


def resolve_container(facts: HostFacts, wanted: str) -> list[Container]:
    """The containers `--container wanted` names: one container, or the containers of one
    pod (its attempts, its sandbox). A UsageError (exit 2) listing the known ones when it
    names none, and those it names when they are several of no one pod (an id prefix two
    ids share, a name a removed container and a new one share, one container name in two
    pods): what it removes must be exactly what was meant."""
    cf = facts.containers
    found = cf.view.find(wanted) if cf else []
    pods = {(c.pod.uid or c.pod.label) if c.pod else None for c in found}
    if len(found) > 1 and (None in pods or len(pods) > 1):
        named = "; ".join(sorted(f"{c.label} {c.state or '?'}" for c in found))
        raise UsageError(
            f"--container {wanted} names {len(found)} containers: {named}; name one by its id"
        )
    if found:
        return found
    known = cf.view.known_labels() if cf else []
    listed = "; ".join(known) if known else "none (no container on this host)"
    note = f" ({'; '.join(cf.view.notes)})" if cf and cf.view.notes else ""
    raise UsageError(f"--container {wanted}: no such container; known: {listed}{note}")


def _containers_in(e: dict[str, Any]) -> list[dict[str, Any]]:
    """The containers an evidence item names: its own, then those of its `left_by`."""
    left = e.get("left_by")
    found = [e.get("container"), *(left.get("containers", []) if isinstance(left, dict) else [])]
    return [x for x in found if isinstance(x, dict)]


class HolderMemory:
    """What `watch` remembers between rounds: which container's processes held each
    /dev/shm file, so a file left when that container went is named by it (only files
    still listed, at most `limit`)."""

    def __init__(self, limit: int = 10000) -> None:
        self.limit = limit
        self._seen: dict[tuple[int, int], Container] = {}

    def inject(self, facts: HostFacts) -> HostFacts:
        cf = facts.containers
        if cf is None or not self._seen:
            return facts
        return replace(facts, containers=replace(cf, seen_holders=dict(self._seen)))

    def remember(self, facts: HostFacts) -> None:
        cf = facts.containers
        if cf is None:
            return
        listed = {(f.dev, f.inode) for f in listed_by_path(facts).values()}
        kept = {k: c for k, c in self._seen.items() if k in listed}
        for node, cid in cf.held_by.items():
            if node in listed and cid in cf.view.containers:
                kept[node] = cf.view.containers[cid]
        self._seen = dict(list(kept.items())[-self.limit :])


def containers_named(evidence: Sequence[dict[str, Any]]) -> list[str]:
    """The labels of the containers a check's evidence names, once each, in order."""
    out = {str(x["label"]): None for e in evidence for x in _containers_in(e) if x.get("label")}
    return list(out)


def scope_report(report: DoctorReport, chosen: Sequence[Container]) -> DoctorReport:
    """Only what the chosen container(s) left or run; a check with findings elsewhere only
    says so and is OK for this container."""
    ids = {c.id for c in chosen}
    label = ", ".join(c.label for c in chosen)
    out = []
    for c in report.checks:
        if not c.evidence:
            out.append(c)
            continue
        kept = tuple(e for e in c.evidence if any(x.get("id") in ids for x in _containers_in(e)))
        if kept:
            mine = f"{label}: {len(kept)} of {len(c.evidence)} item(s)"
            out.append(replace(c, summary=f"{mine}; on the whole host: {c.summary}", evidence=kept))
        else:
            other = len(c.evidence)
            out.append(CheckResult(c.name, OK, f"nothing of {label} ({other} item(s) elsewhere)"))
    return DoctorReport(tuple(out))


def action_container(facts: HostFacts, a: Action) -> dict[str, Any] | None:
    """Whose this action is: the container of the processes it stops, or of the leftover."""
    if isinstance(a, StopProcesses):
        # one container's only when every process it stops runs in that container
        found = {container_of(facts, t.pid) for t in a.targets}
        c = found.pop() if len(found) == 1 else None
        return None if c is None else _named([c], f"runs in {c.label}", "")
    if isinstance(a, RemoveShmFile):
        return left_by_file(facts, a.path)
    return left_by_birth(facts, float(a.seg.ctime))


def _names_any(who: dict[str, Any] | None, ids: set[str]) -> bool:
    """`who` (a `left_by`) names one of `ids`, and no other container: a leftover two
    containers may have left is shown under both, but removed for neither's scope."""
    if who is None or (who["ambiguous"] and not {x["id"] for x in who["containers"]} <= ids):
        return False
    return any(x["id"] in ids for x in who["containers"])


def scope_actions(
    actions: Sequence[Action], facts: HostFacts, chosen: Sequence[Container]
) -> list[Action]:
    ids = {c.id for c in chosen}
    return [a for a in actions if _names_any(action_container(facts, a), ids)]


class ContainerScope:
    """`watch --container NAME|ID`: the containers it names, resolved each round. Once
    resolved, a container that went (`docker rm -f`) keeps the containers it last named, so
    what it left is still its own; a name that never named one is a UsageError."""

    def __init__(self, wanted: str) -> None:
        self.wanted = wanted
        self.chosen: list[Container] | None = None
        self._ids: set[str] = set()
        self._listed: dict[str, ShmFile] = {}  # this round's files by path (`left_file`)

    def resolve(self, facts: HostFacts) -> list[Container]:
        """The chosen containers for this round's `facts`, which the other questions
        are then asked of."""
        try:
            self.chosen = resolve_container(facts, self.wanted)
        except UsageError:
            if self.chosen is None:
                raise
        self._ids = {c.id for c in self.chosen}
        self._listed = listed_by_path(facts)
        return self.chosen

    def runs(self, facts: HostFacts, pid: int) -> bool:
        c = container_of(facts, pid)
        return c is not None and c.id in self._ids

    def left_file(self, facts: HostFacts, path: str) -> bool:
        return _names_any(left_by_file(facts, path, self._listed), self._ids)

    def left_segment(self, facts: HostFacts, ctime: int) -> bool:
        return _names_any(left_by_birth(facts, float(ctime)), self._ids)
