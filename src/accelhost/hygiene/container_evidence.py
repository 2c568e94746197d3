"""Every finding named by its container: evidence annotation and `--container` scoping.

A process carries `container` (null on the host); a leftover carries `left_by`: of the
containers whose own /dev/shm holds it, or of the stopped ones, those whose lifetime covers
its birth (`ambiguous` when it cannot be told which; `others_possible` when someone not
named may have left it), never a guess beyond that. `scope_report` / `scope_actions` keep
what one container left (`doctor`/`clean --container`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from accelhost.containers.model import RUNNING, Container, ContainerView
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


def _alive_at(c: Container, born: float) -> bool:
    """Whether `c` may have run at `born`: not known to have started after it (one restarted
    in place ran before its last start too) nor to have finished before it."""
    late = c.started is not None and not c.restarts and born < c.started - LIFETIME_SLACK_S
    done = c.state != RUNNING and c.finished is not None and born > c.finished + LIFETIME_SLACK_S
    return not (late or done)


def _host_shm(view: ContainerView, c: Container) -> bool | None:
    """Whether `c` used the host's /dev/shm, by its IPC mode (`container:ID`: that one's);
    None when unknown (a removed container's: the runtime's events do not say)."""
    mode = c.ipc_mode or ""
    if mode.startswith("container:"):
        them = view.find(mode.removeprefix("container:"))
        mode = (them[0].ipc_mode or "") if len(them) == 1 else ""
    if c.shares_host_ipc is not None or mode in _PRIVATE_IPC:
        return bool(c.shares_host_ipc)
    return True if mode == "host" else None


def _host_engines(facts: HostFacts, born: float) -> list[int]:
    """Engine processes in no container that ran at `born` (one gone since is not known)."""
    return [pid for start, pid in facts.host_engines if start <= born + LIFETIME_SLACK_S]


def left_by_birth(facts: HostFacts, born: float | None) -> dict[str, Any] | None:
    """The stopped containers whose lifetime covers `born` (host /dev/shm, SysV): one whose
    IPC mode is unknown only as a possible author, and a host engine that ran then makes
    every one of them only possible."""
    cf = facts.containers
    if cf is None or born is None:
        return None
    stopped = [c for c in cf.view.containers.values() if c.state != RUNNING and c.started]
    alive = sorted((c for c in stopped if _alive_at(c, born)), key=lambda c: (c.started, c.id))
    shm = [(c, _host_shm(cf.view, c)) for c in alive]
    sure = [c for c, host in shm if host]
    maybe = [c for c, host in shm if host is None]
    found = sure + maybe
    if not found:
        return None
    hosts = _host_engines(facts, born)
    why = []
    if sure:
        gone = "it no longer runs" if len(sure) == 1 else "none of them runs now"
        why.append(f"born while {_labels(sure)} ran; {gone}")
    if maybe:
        each = "it" if len(maybe) == 1 else "each"
        why.append(f"possibly {_labels(maybe, ' or ')} (IPC mode unknown), born while {each} ran")
    if hosts:
        why.append(f"engine pid(s) {' '.join(map(str, hosts))} on the host ran then too")
    tail = ", cannot tell which" if hosts and len(found) == 1 else ""
    return _named(found, "; ".join(why) + tail, "candidates", not sure or bool(hosts))


def _labels(found: Sequence[Container], sep: str = " and ") -> str:
    return sep.join(c.label for c in found)


def _named(found: Sequence[Container], why: str, what: str, others: bool = False) -> dict[str, Any]:
    """`left_by`: the containers that may have left it; `ambiguous` when it cannot be told
    which: several, or `others_possible` (someone not named may have: never in a scope)."""
    if len(found) > 1:
        why += f": {len(found)} {what}, cannot tell which"
    return {
        "containers": [container_json(c) for c in found],
        "ambiguous": len(found) > 1 or others,
        "others_possible": others,
        "why": why,
    }


def left_by_dir(facts: HostFacts, path: str, born: float | None = None) -> dict[str, Any] | None:
    """The containers whose own /dev/shm holds `path`: of its engines (else all) and the
    containers no longer seen that shared it (a pod's crashed attempts), those that ran
    when it was born; where none did, or a pod's known lifetimes do not cover it, someone
    else may have."""
    cf = facts.containers
    if cf is None:
        return None
    d = next((d for d in cf.shm_dirs if path.startswith(d.path + "/")), None)
    if d is None:
        return None
    view = cf.view
    found = [view.containers[i] for i in d.container_ids if i in view.containers]
    is_engine = build_catalog().is_engine
    chosen = [c for c in found if runs_engine(facts, c, is_engine)] or found
    pool = chosen + [
        c for c in view.containers.values() if c.id not in d.container_ids and _shared(c, found)
    ]
    alive = [c for c in pool if born is None or _alive_at(c, born)]
    # each attempt of a pod is a new container: only a lifetime known at both ends rules out
    # one the runtime no longer lists
    told = bool(alive) and (
        born is None
        or not any(c.pod for c in found)
        or any(c.started and (c.state == RUNNING or c.finished) for c in alive)
    )
    why = "in the /dev/shm of " + _labels(pool)
    if alive and alive != pool:
        why += f"; born while {_labels(alive)} {'ran' if told else 'may have run'}"
    if not told:
        why += "; no lifetime known covers its birth: cannot tell who"
    return _named(alive or pool, why, "containers share it", not told)


def _shared(c: Container, found: Sequence[Container]) -> bool:
    """`c` wrote the /dev/shm of `found`: another attempt of their pod, or it joined one's
    IPC namespace (`container:ID`)."""
    uids = {f.pod.uid for f in found if f.pod and f.pod.uid}
    mode = c.ipc_mode or ""
    joined = mode.startswith("container:") and any(
        f.matches(mode.removeprefix("container:")) for f in found
    )
    return joined or (c.pod is not None and c.pod.uid in uids)


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
    # what a watch saw holding it first: better than any lifetime
    seen = left_by_seen(facts, f)
    return seen or left_by_dir(facts, path, born) or left_by_birth(facts, born)


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


def actions_containers(facts: HostFacts, actions: Sequence[Action]) -> list[dict[str, Any] | None]:
    """Whose each action is: the container of the processes it stops, or of the leftover
    (the files listed are indexed once: a clean after a pile-up plans thousands)."""
    listed = listed_by_path(facts)
    return [_action_container(facts, a, listed) for a in actions]


def _action_container(
    facts: HostFacts, a: Action, listed: Mapping[str, ShmFile]
) -> dict[str, Any] | None:
    if isinstance(a, StopProcesses):
        # one container's only when every process it stops runs in that container
        found = {container_of(facts, t.pid) for t in a.targets}
        c = found.pop() if len(found) == 1 else None
        return None if c is None else _named([c], f"runs in {c.label}", "")
    if isinstance(a, RemoveShmFile):
        return left_by_file(facts, a.path, listed)
    return left_by_birth(facts, float(a.seg.ctime))


def _names_any(who: dict[str, Any] | None, ids: set[str]) -> bool:
    """`who` (a `left_by`) names one of `ids`, and no other container: a leftover two
    containers may have left is shown under both, but removed for neither's scope."""
    named = {x["id"] for x in who["containers"]} if who else set()
    if who is None or who.get("others_possible") or (who["ambiguous"] and not named <= ids):
        return False
    return any(x["id"] in ids for x in who["containers"])


def scope_actions(
    actions: Sequence[Action], facts: HostFacts, chosen: Sequence[Container]
) -> list[Action]:
    ids, facts = {c.id for c in chosen}, _knowing(facts, chosen)
    whose = actions_containers(facts, actions)
    return [a for a, who in zip(actions, whose, strict=True) if _names_any(who, ids)]


def _knowing(facts: HostFacts, chosen: Sequence[Container]) -> HostFacts:
    """`facts` with the IPC mode an earlier look read of a chosen container where this one
    lacks it: a watch read it while the container ran; once removed, only the events name
    it, and they do not say."""
    cf = facts.containers
    known = cf.view.containers if cf else {}
    fill = {
        c.id: replace(known[c.id], ipc_mode=c.ipc_mode)
        for c in chosen
        if c.ipc_mode and c.id in known and not known[c.id].ipc_mode
    }
    if cf is None or not fill:
        return facts
    view = replace(cf.view, containers={**known, **fill})
    return replace(facts, containers=replace(cf, view=view))


class ContainerScope:
    """`watch --container NAME|ID`: the containers it names, resolved each round. Once
    resolved, a container that went (`docker rm -f`) keeps the containers it last named, and
    the IPC mode read of it, so what it left is still its own; a name that never named one
    is a UsageError."""

    def __init__(self, wanted: str) -> None:
        self.wanted = wanted
        self.chosen: list[Container] | None = None
        self._ids: set[str] = set()
        self._listed: dict[str, ShmFile] = {}  # this round's files by path (`left_file`)
        self._facts: HostFacts | None = None  # this round's, knowing the chosen (`_knowing`)

    def resolve(self, facts: HostFacts) -> list[Container]:
        """The chosen containers for this round's `facts`, which the other questions
        (`runs`, `left_file`, `left_segment`) are then asked of."""
        before = {c.id: c.ipc_mode for c in self.chosen or ()}
        try:
            found = resolve_container(facts, self.wanted)
        except UsageError:
            if self.chosen is None:
                raise
            found = self.chosen
        self.chosen = [c if c.ipc_mode else replace(c, ipc_mode=before.get(c.id)) for c in found]
        self._ids = {c.id for c in self.chosen}
        self._listed = listed_by_path(facts)
        # once per round, not per leftover: a new facts object finds its host engines anew
        self._facts = _knowing(facts, self.chosen)
        return self.chosen

    def _round(self) -> HostFacts:
        assert self._facts is not None, "resolve() first"
        return self._facts

    def runs(self, pid: int) -> bool:
        c = container_of(self._round(), pid)
        return c is not None and c.id in self._ids

    def left_file(self, path: str) -> bool:
        return _names_any(left_by_file(self._round(), path, self._listed), self._ids)

    def left_segment(self, ctime: int) -> bool:
        return _names_any(left_by_birth(self._round(), float(ctime)), self._ids)
