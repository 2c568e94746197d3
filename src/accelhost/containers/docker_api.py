"""Docker's (and Podman's compatible) Engine API answers, parsed (pure): the container
list, one container's inspect, and the recent `start`/`die`/`destroy` events (how a
container removed with `docker rm -f` is still named). Anything malformed is skipped,
never raised: a runtime answering garbage leaves names unknown, it does not stop a doctor.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from calendar import timegm
from dataclasses import dataclass
from typing import Any

from accelhost.containers.model import EXITED, GONE, RUNNING, Container, Pod
from accelhost.host.redact import redact_argv

LIST_PATH = "/containers/json?all=1"
_FULL_ID = re.compile("[0-9a-f]{64}")
_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")
_POD_LABELS = ("io.kubernetes.pod.name", "io.kubernetes.pod.namespace", "io.kubernetes.pod.uid")
# Docker's words for a container's state, as accelhost's
_STATES = {
    **dict.fromkeys(("running", "paused", "restarting"), RUNNING),
    **dict.fromkeys(("exited", "dead", "created", "removing"), EXITED),
}
EVENT_ACTIONS = ("start", "die", "destroy")
# Podman's compatible API names a container's end and removal its own way ("died" in
# Action, "remove"), and filters by those names: each is read as Docker's.
PODMAN_ACTIONS = ("start", "die", "died", "remove")
_AS_DOCKER = {**{a: a for a in EVENT_ACTIONS}, "died": "die", "remove": "destroy"}


def events_path(since: int, until: int | str, runtime: str = "docker") -> str:
    """Container start/die/destroy events in [since, until] (both given: the answer ends;
    `until` may have a fraction, "SECONDS.MICROS", as Docker and Podman take it), by the
    names `runtime` gives them."""
    names = PODMAN_ACTIONS if runtime == "podman" else EVENT_ACTIONS
    filters = json.dumps({"type": ["container"], "event": list(names)}, sort_keys=True)
    query = urllib.parse.urlencode({"since": since, "until": until, "filters": filters})
    return f"/events?{query}"


def parse_time(text: Any) -> float | None:
    """RFC 3339 (nanoseconds allowed) -> epoch seconds; Docker's zero time -> None."""
    m = _TIME.match(text) if isinstance(text, str) else None
    if not m:
        return None
    year, mon, day, hh, mm, ss = (int(g) for g in m.groups()[:6])
    if year < 1971:  # 0001-01-01T00:00:00Z: never started / not finished
        return None
    try:
        base = timegm((year, mon, day, hh, mm, ss, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    frac = float(m.group(7)) if m.group(7) else 0.0
    zone = m.group(8)  # Z, or +HH:MM / -HH:MM: the sign is both fields'
    offset = 0 if zone == "Z" else int(zone[:3]) * 3600 + int(zone[0] + zone[4:6]) * 60
    return base + frac - offset


def as_object(value: Any) -> dict[str, Any]:
    """A JSON object, or an empty one for anything else (a runtime may answer garbage)."""
    return value if isinstance(value, dict) else {}


def objects_in(value: Any) -> list[dict[str, Any]]:
    """The JSON objects in a list; none in anything else."""
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def _strings_in(value: Any) -> list[str]:
    return [x for x in value if isinstance(x, str)] if isinstance(value, list) else []


def load_json(text: str | None) -> Any:
    """Parsed JSON, or None for empty or malformed text (never raises)."""
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def full_id(value: Any) -> str | None:
    """A runtime's full container id (64 lowercase hex, nothing else: no trailing newline
    either), or None."""
    return value if isinstance(value, str) and _FULL_ID.fullmatch(value) else None


def text_of(value: Any) -> str | None:
    """A non-empty string, or None."""
    return value if isinstance(value, str) and value else None


def _state(word: Any) -> str | None:
    return _STATES.get(word) if isinstance(word, str) else None


def pod_of(labels: Any) -> Pod | None:
    """The Kubernetes pod a container's labels name, if any (Docker's and CRI's alike)."""
    name, ns, uid = (text_of(as_object(labels).get(k)) for k in _POD_LABELS)
    return Pod(ns, name, uid) if (name or uid) else None


def parse_container_list(text: str | None, runtime: str = "docker") -> list[Container] | None:
    """`GET /containers/json?all=1` -> containers (None when the answer is no list)."""
    data = load_json(text)
    if not isinstance(data, list):
        return None
    out = []
    for item in objects_in(data):
        cid = full_id(item.get("Id"))
        if cid is None:
            continue
        name = next((n.lstrip("/") for n in _strings_in(item.get("Names"))), None)
        out.append(
            Container(
                runtime=runtime,
                id=cid,
                name=name or None,
                image=text_of(item.get("Image")),
                state=_state(item.get("State")),
                pod=pod_of(item.get("Labels")),
            )
        )
    return out


def parse_inspect(text: str | None, runtime: str = "docker") -> tuple[Container, int | None] | None:
    """`GET /containers/ID/json` -> the container and its PID 1 on the host (None when it
    does not run: Docker says 0)."""
    data = load_json(text)
    if not isinstance(data, dict):
        return None
    cid = full_id(data.get("Id"))
    if cid is None:
        return None
    state = as_object(data.get("State"))
    host_config = as_object(data.get("HostConfig"))
    config = as_object(data.get("Config"))
    path = text_of(data.get("Path"))
    argv = ([path] if path else []) + _strings_in(data.get("Args"))
    pid, restarts = state.get("Pid"), data.get("RestartCount")
    return (
        Container(
            runtime=runtime,
            id=cid,
            name=(text_of(data.get("Name")) or "").lstrip("/") or None,
            image=text_of(config.get("Image")) or text_of(data.get("Image")),
            state=_state(state.get("Status")),
            pod=pod_of(config.get("Labels")),
            started=parse_time(state.get("StartedAt")),
            finished=parse_time(state.get("FinishedAt")),
            restarts=restarts if type(restarts) is int else None,
            ipc_mode=text_of(host_config.get("IpcMode")),
            pid1_command=" ".join(argv) or None,
        ),
        pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None,
    )


@dataclass(frozen=True)
class RuntimeEvent:
    action: str  # start, die, destroy
    container_id: str
    name: str | None
    image: str | None
    time: float  # epoch seconds


def parse_events(text: str | None) -> list[RuntimeEvent]:
    """The container events of a `GET /events` answer (one JSON object per line)."""
    out = []
    for line in (text or "").splitlines():
        data = load_json(line.strip())
        if not isinstance(data, dict):
            continue
        actor = as_object(data.get("Actor"))
        attrs = as_object(actor.get("Attributes"))
        said = data.get("Action") or data.get("status")
        action = _AS_DOCKER.get(said) if isinstance(said, str) else None
        cid = full_id(actor.get("ID") or data.get("id"))
        nano, secs = data.get("timeNano"), data.get("time")
        if isinstance(nano, int) and not isinstance(nano, bool) and nano > 0:
            when = nano / 1e9
        elif isinstance(secs, (int, float)) and not isinstance(secs, bool) and secs > 0:
            when = float(secs)
        else:
            continue
        if action is None or cid is None:
            continue
        name, image = text_of(attrs.get("name")), text_of(attrs.get("image"))
        out.append(RuntimeEvent(action, cid, name, image, when))
    return out


def removed_containers(events: list[RuntimeEvent], runtime: str = "docker") -> list[Container]:
    """Containers whose `destroy` is in the events: gone, named by their last events, with
    the lifetime their `start` and `die` events give (None where the window missed one)."""
    by_id: dict[str, list[RuntimeEvent]] = {}
    for ev in sorted(events, key=lambda e: e.time):
        by_id.setdefault(ev.container_id, []).append(ev)
    return [
        Container(
            runtime=runtime,
            id=cid,
            name=next((e.name for e in reversed(evs) if e.name), None),
            image=next((e.image for e in reversed(evs) if e.image), None),
            state=GONE,
            started=next((e.time for e in evs if e.action == "start"), None),
            finished=next((e.time for e in reversed(evs) if e.action == "die"), None),
        )
        for cid, evs in by_id.items()
        if any(e.action == "destroy" for e in evs)
    ]


def _kube_labels(labels: Any) -> dict[str, str]:
    return {k: v for k, v in as_object(labels).items() if k.startswith("io.kubernetes.")}


def trim_answer(path: str, body: str) -> str:
    """What a snapshot keeps of a runtime's answer: the fields read above, nothing else
    (an inspect answer holds the container's environment: tokens, keys), with secret
    option values in the argv hidden."""
    if path.startswith("/events"):
        lines = []
        for ev in parse_events(body):
            attrs = {k: v for k, v in (("name", ev.name), ("image", ev.image)) if v}
            actor = {"ID": ev.container_id, "Attributes": attrs}
            ev_time = {"time": int(ev.time), "timeNano": int(ev.time * 1e9)}
            event = {"Type": "container", "Action": ev.action, "Actor": actor, **ev_time}
            lines.append(json.dumps(event) + "\n")
        return "".join(lines)
    data = load_json(body)
    if isinstance(data, list):
        data = [
            {k: item.get(k) for k in ("Id", "Names", "Image", "State")}
            | {"Labels": _kube_labels(item.get("Labels"))}
            for item in objects_in(data)
        ]
    elif isinstance(data, dict):
        state = as_object(data.get("State"))
        config = as_object(data.get("Config"))
        data = {
            **{k: data.get(k) for k in ("Id", "Name", "Path")},
            "Args": redact_argv(_strings_in(data.get("Args"))),
            "RestartCount": data.get("RestartCount"),
            "State": {
                k: state.get(k) for k in ("Status", "Pid", "StartedAt", "FinishedAt", "ExitCode")
            },
            "HostConfig": {"IpcMode": as_object(data.get("HostConfig")).get("IpcMode")},
            "Config": {"Image": config.get("Image"), "Labels": _kube_labels(config.get("Labels"))},
        }
    else:
        return ""
    return json.dumps(data)
