"""A CRI runtime's answers, parsed (pure): the plain data `Host.cri_look` returns (and a
snapshot replays) -> `Container`s with their pods, attempts and sandboxes.

Every container the runtime lists is kept, live or exited (the kubelet keeps a crashed
attempt's record until it collects it), and every pod sandbox as a container of its own
(`is_sandbox`: the pod's pause container, whose id is the sandbox's), named `POD` as the
kubelet names it in Docker. A pod is named by its sandbox's metadata, else by the
`io.kubernetes.pod.*` labels. Anything malformed (a hand-edited snapshot) is skipped, never
raised: a missing field is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accelhost.containers.docker_api import as_object, full_id, objects_in, pod_of, text_of
from accelhost.containers.model import EXITED, RUNNING, Container, Pod

SANDBOX_NAME = "POD"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"
# the runtime's own name (VersionResponse.runtime_name) -> accelhost's word for it
RUNTIME_WORDS = {"containerd": "containerd", "cri-o": "cri-o", "docker": "docker"}
_STATES = {
    "CONTAINER_RUNNING": RUNNING,
    "CONTAINER_EXITED": EXITED,
    "CONTAINER_CREATED": EXITED,  # never started: nothing of it runs (Docker's "created")
    "SANDBOX_READY": RUNNING,
    "SANDBOX_NOTREADY": EXITED,
}


@dataclass(frozen=True)
class CriAnswer:
    """One CRI socket's look: what it said, or why it said nothing."""

    endpoint: str
    runtime: str = "kubernetes"
    version: str | None = None  # "containerd 1.6.20"
    containers: Mapping[str, Container] = field(default_factory=dict)  # with the sandboxes
    pids: Mapping[str, int] = field(default_factory=dict)  # container id -> its PID 1
    error: str | None = None

    @property
    def answered(self) -> bool:
        return self.error is None


def parse_cri_look(endpoint: str, answer: Any) -> CriAnswer | None:
    """`answer` from `Host.cri_look(endpoint)`; None where it was None (no such socket)."""
    if answer is None:
        return None
    data = as_object(answer)
    if "error" in data or not data:
        return CriAnswer(endpoint, error=text_of(data.get("error")) or "no answer")
    version = as_object(data.get("version"))
    name = text_of(version.get("runtime_name"))
    runtime = RUNTIME_WORDS.get(name or "", "kubernetes")
    said = " ".join(x for x in (name, text_of(version.get("runtime_version"))) if x)
    boxes = (_sandbox(item, runtime) for item in objects_in(data.get("sandboxes")))
    sandboxes = {box.id: box for box in boxes if box is not None}
    statuses = as_object(data.get("statuses"))
    containers: dict[str, Container] = dict(sandboxes)
    pids: dict[str, int] = {}
    for item in objects_in(data.get("containers")):
        cid = full_id(item.get("id"))
        if cid is None:
            continue
        status = as_object(statuses.get(cid))
        containers[cid] = _container(cid, item, status, runtime, sandboxes)
        pid = status.get("pid")
        if type(pid) is int and pid > 0:
            pids[cid] = pid
    return CriAnswer(endpoint, runtime, said or None, containers, pids)


def _seconds(value: Any) -> float | None:
    """The CRI's nanoseconds since the epoch -> seconds; 0 (not started, not finished)
    and anything that is not a whole number -> None."""
    if type(value) is not int or value <= 0:
        return None
    whole, part = divmod(value, 1_000_000_000)
    return whole + part / 1e9  # not value / 1e9: a float loses the last digits of that


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _sandbox(item: dict[str, Any], runtime: str) -> Container | None:
    sid = full_id(item.get("id"))
    if sid is None:
        return None
    ns, name, uid = (text_of(item.get(k)) for k in ("namespace", "name", "uid"))
    pod = Pod(ns, name, uid) if (name or uid) else pod_of(item.get("labels"))
    return Container(
        runtime=runtime,
        id=sid,
        name=SANDBOX_NAME,
        state=_STATES.get(str(item.get("state"))),
        pod=pod,
        started=_seconds(item.get("created_at")),
        attempt=_count(item.get("attempt")),
        sandbox_id=sid,
    )


def _container(
    cid: str,
    item: dict[str, Any],
    status: dict[str, Any],
    runtime: str,
    sandboxes: Mapping[str, Container],
) -> Container:
    labels = item.get("labels")
    sandbox_id = full_id(item.get("sandbox_id"))
    box = sandboxes.get(sandbox_id) if sandbox_id else None
    name = text_of(item.get("name")) or text_of(as_object(labels).get(CONTAINER_NAME_LABEL))
    state = _STATES.get(str(status.get("state") or item.get("state")))
    mounts = {p for m in objects_in(status.get("mounts")) if (p := text_of(m.get("host_path")))}
    return Container(
        runtime=runtime,
        id=cid,
        name=name,
        image=text_of(status.get("image")) or text_of(item.get("image")),
        state=state,
        pod=box.pod if box is not None and box.pod is not None else pod_of(labels),
        started=_seconds(status.get("started_at")),
        finished=_seconds(status.get("finished_at")),
        attempt=_count(item.get("attempt")),
        sandbox_id=sandbox_id,
        mounts=tuple(sorted(mounts)),
    )
