"""Whose is this process, /dev/shm file or segment, said only as far as it is known.

A process is in the container its cgroup names (None on the host). A leftover was left by
(`LeftBy`) the container a `watch` saw holding it, else the containers whose own /dev/shm
holds it, else the stopped containers whose lifetime covers its birth; `ambiguous` when
it cannot be told which, `others_possible` when someone not named may have (a container
of unknown IPC mode, a host engine of the user's catalog running then). One object per
round: what is costly to find is found once, not per leftover, and what earlier rounds
learned is handed to it by the watch that remembers it, never stored in the facts.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from accelhost.containers.model import RUNNING, Container, ContainerView
from accelhost.errors import UsageError
from accelhost.hygiene.engines import Catalog
from accelhost.hygiene.facts.host import HostFacts
from accelhost.readers.shmfiles import ShmFile

# A leftover born this close outside a container's lifetime is still its (clocks of the
# runtime and the kernel differ by a little, and a file is made just after a start).
LIFETIME_SLACK_S = 2.0
_PRIVATE_IPC = ("private", "none", "shareable")
Inode = tuple[int, int]  # (st_dev, st_ino)


def container_json(c: Container | None) -> dict[str, Any] | None:
    return None if c is None else {"label": c.label, **c.to_dict()}


@dataclass(frozen=True)
class LeftBy:
    """The containers that may have left a leftover, and how sure that is."""

    containers: tuple[Container, ...]
    ambiguous: bool  # several, or someone not named may have left it
    others_possible: bool  # someone not named may have: never in a `--container` scope
    why: str

    @classmethod
    def of(cls, found: Sequence[Container], why: str, what: str, others: bool = False) -> LeftBy:
        if len(found) > 1:
            why += f": {len(found)} {what}, cannot tell which"
        return cls(tuple(found), len(found) > 1 or others, others, why)

    def names(self, ids: Collection[str]) -> bool:
        """One of `ids` is among those named, sure or not."""
        return any(c.id in ids for c in self.containers)

    def only(self, ids: Collection[str]) -> bool:
        """Left by one of `ids` and by no other container, for sure: what a `--container`
        scope may remove (a leftover two containers may have left is shown under both,
        removed for neither's scope)."""
        mine = {c.id for c in self.containers} <= set(ids)
        return not self.others_possible and (mine or not self.ambiguous) and self.names(ids)

    def to_dict(self) -> dict[str, Any]:
        """The JSON's `left_by` (and an action's `container`)."""
        return {**vars(self), "containers": [container_json(c) for c in self.containers]}


def _labels(found: Sequence[Container], sep: str = " and ") -> str:
    return sep.join(c.label for c in found)


def _alive_at(c: Container, born: float) -> bool:
    """Whether `c` may have run at `born`: not known to have started after it (one restarted
    in place ran before its last start too) nor to have finished before it."""
    late = c.started is not None and not c.restarts and born < c.started - LIFETIME_SLACK_S
    done = c.state != RUNNING and c.finished is not None and born > c.finished + LIFETIME_SLACK_S
    return not (late or done)


class Attribution:
    """One round's "whose is this", from its facts, the user's engine catalog and what the
    watch remembers: `seen_holders` (which container's processes an earlier round saw
    holding each /dev/shm file) and `ipc_modes` (the IPC mode read of a container while
    it ran: once removed, only the runtime's events name it, and they do not say)."""

    def __init__(
        self,
        facts: HostFacts,
        catalog: Catalog,
        seen_holders: Mapping[Inode, Container] | None = None,
        ipc_modes: Mapping[str, str] | None = None,
    ) -> None:
        self.facts = facts
        self.catalog = catalog
        self.seen_holders = dict(seen_holders or {})
        view = facts.containers.view if facts.containers is not None else ContainerView()
        modes = ipc_modes or {}
        fill = {
            i: replace(c, ipc_mode=modes[i])
            for i, c in view.containers.items()
            if not c.ipc_mode and modes.get(i)
        }
        self.view = replace(view, containers={**view.containers, **fill}) if fill else view
        self._engine_in: dict[str, bool] = {}

    def container_of(self, pid: int) -> Container | None:
        return self.view.of_pid(pid)  # an empty view where no containers were read

    def runs_engine(self, c: Container) -> bool:
        """Some process of `c` is an engine's (the user's catalog)."""
        if c.id not in self._engine_in:
            procs, is_engine = self.facts.processes or {}, self.catalog.is_engine
            self._engine_in[c.id] = any(
                p in procs and is_engine(procs[p].command) for p in self.view.pids_of(c.id)
            )
        return self._engine_in[c.id]

    @cached_property
    def _host_engine_starts(self) -> list[tuple[float, int]]:
        """(start, pid) of the engine processes in no container: they write the host's
        /dev/shm too (one gone since is not known)."""
        f = self.facts
        if f.now_epoch is None:
            return []
        return [
            (f.now_epoch - age, pid)
            for pid, p in sorted((f.processes or {}).items())
            if pid not in self.view.pid_container
            and (age := f.process_age_s(p)) is not None
            and not p.is_zombie
            and self.catalog.is_engine(p.command)
        ]

    @cached_property
    def listed(self) -> Mapping[str, ShmFile]:
        """Every /dev/shm file listed, the host's and the containers' own, by path."""
        cf = self.facts.containers
        dirs = [*self.facts.shm_files.values(), *(d.files for d in (cf.shm_dirs if cf else ()))]
        return {f.path: f for files in dirs for f in files or ()}

    def left_file(self, path: str) -> LeftBy | None:
        f = self.listed.get(path)
        born = None if f is None else (f.birth if f.birth is not None else f.mtime)
        # what a watch saw holding it first: better than any lifetime
        return self._left_seen(f) or self._left_in_dir(path, born) or self.left_at(born)

    def _left_seen(self, f: ShmFile | None) -> LeftBy | None:
        """The container whose processes an earlier look (a `watch` round) saw holding it."""
        c = self.seen_holders.get((f.dev, f.inode)) if f and f.inode else None
        if c is None or self.facts.containers is None:
            return None
        return LeftBy.of([c], f"its processes were seen holding it ({c.label})", "")

    def _host_shm(self, c: Container) -> bool | None:
        """Whether `c` used the host's /dev/shm, by its IPC mode (`container:ID`: that
        one's); None when unknown (a removed container's: the runtime's events do not say)."""
        mode = c.ipc_mode or ""
        if mode.startswith("container:"):
            them = self.view.find(mode.removeprefix("container:"))
            mode = (them[0].ipc_mode or "") if len(them) == 1 else ""
        if c.shares_host_ipc is not None or mode in _PRIVATE_IPC:
            return bool(c.shares_host_ipc)
        return True if mode == "host" else None

    def left_at(self, born: float | None) -> LeftBy | None:
        """The stopped containers whose lifetime covers `born` (host /dev/shm, SysV): one
        whose IPC mode is unknown only as a possible author, and a host engine that ran
        then makes every one of them only possible."""
        if born is None:
            return None
        stopped = [c for c in self.view.containers.values() if c.state != RUNNING and c.started]
        alive = sorted((c for c in stopped if _alive_at(c, born)), key=lambda c: (c.started, c.id))
        shm = [(c, self._host_shm(c)) for c in alive]
        sure = [c for c, host in shm if host]
        maybe = [c for c, host in shm if host is None]
        found = sure + maybe
        if not found:
            return None
        hosts = [pid for start, pid in self._host_engine_starts if start <= born + LIFETIME_SLACK_S]
        why = []
        if sure:
            gone = "it no longer runs" if len(sure) == 1 else "none of them runs now"
            why.append(f"born while {_labels(sure)} ran; {gone}")
        if maybe:
            each = "it" if len(maybe) == 1 else "each"
            said = _labels(maybe, " or ")
            why.append(f"possibly {said} (IPC mode unknown), born while {each} ran")
        if hosts:
            why.append(f"engine pid(s) {' '.join(map(str, hosts))} on the host ran then too")
        tail = ", cannot tell which" if hosts and len(found) == 1 else ""
        return LeftBy.of(found, "; ".join(why) + tail, "candidates", not sure or bool(hosts))

    def _left_in_dir(self, path: str, born: float | None) -> LeftBy | None:
        """The containers whose own /dev/shm holds `path`: of its engines (else all) and the
        containers no longer seen that shared it (a pod's crashed attempts), those that ran
        when it was born; where none did, or a pod's known lifetimes do not cover it,
        someone else may have."""
        dirs = self.facts.containers.shm_dirs if self.facts.containers else ()
        d = next((d for d in dirs if path.startswith(d.path + "/")), None)
        if d is None:
            return None
        view = self.view
        found = [view.containers[i] for i in d.container_ids if i in view.containers]
        if d.pod_uid is None:
            chosen = [c for c in found if self.runs_engine(c)] or found
            # a pod's sandbox (pause) container writes no /dev/shm
            pool = chosen + [
                c
                for c in view.containers.values()
                if c.id not in d.container_ids and not c.is_sandbox and _shared(c, found)
            ]
        else:  # a volume: every attempt of the containers it is mounted into, not a
            # running one that runs no engine
            pool = [c for c in found if c.state != RUNNING or self.runs_engine(c)] or found
        if not pool and d.pod_uid is not None:
            why = f"in the emptyDir of pod uid {d.pod_uid}, whose containers no runtime named"
            return LeftBy((), True, True, why)
        alive = [c for c in pool if born is None or _alive_at(c, born)]
        # each attempt of a pod is a new container: only a lifetime known at both ends rules
        # out one the runtime no longer lists
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
        return LeftBy.of(alive or pool, why, "containers share it", not told)

    def resolve(self, wanted: str) -> list[Container]:
        """The containers `--container wanted` names: one container, or the containers of
        one pod (its attempts, its sandbox). A UsageError (exit 2) listing the known ones
        when it names none, and those it names when they are several of no one pod (an id
        prefix two ids share, a name a removed container and a new one share, one container
        name in two pods): what it removes must be exactly what was meant."""
        found = self.view.find(wanted)
        pods = {(c.pod.uid or c.pod.label) if c.pod else None for c in found}
        if len(found) > 1 and (None in pods or len(pods) > 1):
            named = "; ".join(sorted(f"{c.label} {c.state or '?'}" for c in found))
            raise UsageError(
                f"--container {wanted} names {len(found)} containers: {named}; name one by its id"
            )
        if found:
            return found
        known = self.view.known_labels()
        listed = "; ".join(known) if known else "none (no container on this host)"
        note = f" ({'; '.join(self.view.notes)})" if self.view.notes else ""
        raise UsageError(f"--container {wanted}: no such container; known: {listed}{note}")


def _shared(c: Container, found: Sequence[Container]) -> bool:
    """`c` wrote the /dev/shm of `found`: another attempt of their pod, or it joined one's
    IPC namespace (`container:ID`)."""
    uids = {f.pod.uid for f in found if f.pod and f.pod.uid}
    mode = c.ipc_mode or ""
    joined = mode.startswith("container:") and any(
        f.matches(mode.removeprefix("container:")) for f in found
    )
    return joined or (c.pod is not None and c.pod.uid in uids)
