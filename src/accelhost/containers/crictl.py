"""`crictl ps -a -o json` and `crictl inspect ID`, parsed (pure): names of the containers a
CRI runtime (containerd, CRI-O) runs for Kubernetes. Malformed input is skipped.
"""

from __future__ import annotations

from accelhost.containers.docker_api import as_object, load_json, parse_time, pod_of, text_of
from accelhost.containers.model import EXITED, RUNNING, Container

PS_ARGV = ("crictl", "ps", "-a", "-o", "json")


def inspect_argv(container_id: str) -> list[str]:
    return ["crictl", "inspect", "-o", "json", container_id]


def parse_crictl_ps(text: str | None, runtime: str = "kubernetes") -> list[Container] | None:
    data = load_json(text)
    items = data.get("containers") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            continue
        cid = item["id"]
        if len(cid) != 64 or any(c not in "0123456789abcdef" for c in cid):
            continue
        labels = as_object(item.get("labels"))
        name = text_of(as_object(item.get("metadata")).get("name"))
        state = item.get("state")
        out.append(
            Container(
                runtime=runtime,
                id=cid,
                name=name or text_of(labels.get("io.kubernetes.container.name")),
                image=text_of(as_object(item.get("image")).get("image")),
                state=RUNNING if state == "CONTAINER_RUNNING" else EXITED if state else None,
                pod=pod_of(labels),
            )
        )
    return out


def parse_crictl_inspect(text: str | None) -> tuple[float | None, float | None]:
    """(started, finished) epoch seconds from `crictl inspect -o json`."""
    data = load_json(text)
    status = data.get("status") if isinstance(data, dict) else None
    if not isinstance(status, dict):
        return None, None
    return parse_time(status.get("startedAt")), parse_time(status.get("finishedAt"))
