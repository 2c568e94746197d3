"""`crictl ps -a -o json` and `crictl inspect ID`, parsed (pure): names of the containers a
CRI runtime (containerd, CRI-O) runs for Kubernetes. Malformed input is skipped.
"""

from __future__ import annotations

from accelhost.containers.docker_api import as_object as _obj
from accelhost.containers.docker_api import load_json as _loads
from accelhost.containers.docker_api import parse_time
from accelhost.containers.docker_api import text_of as _s
from accelhost.containers.model import EXITED, RUNNING, Container, Pod

PS_ARGV = ("crictl", "ps", "-a", "-o", "json")


def inspect_argv(container_id: str) -> list[str]:
    return ["crictl", "inspect", "-o", "json", container_id]


def parse_crictl_ps(text: str | None, runtime: str = "kubernetes") -> list[Container] | None:
    data = _loads(text)
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
        meta = _obj(item.get("metadata"))
        image = _obj(item.get("image"))
        labels = _obj(item.get("labels"))
        state = item.get("state")
        pod_name = _s(labels.get("io.kubernetes.pod.name"))
        pod_uid = _s(labels.get("io.kubernetes.pod.uid"))
        out.append(
            Container(
                runtime=runtime,
                id=cid,
                name=_s(meta.get("name")) or _s(labels.get("io.kubernetes.container.name")),
                image=_s(image.get("image")),
                state=RUNNING if state == "CONTAINER_RUNNING" else EXITED if state else None,
                pod=Pod(_s(labels.get("io.kubernetes.pod.namespace")), pod_name, pod_uid)
                if pod_name or pod_uid
                else None,
            )
        )
    return out


def parse_crictl_inspect(text: str | None) -> tuple[float | None, float | None]:
    """(started, finished) epoch seconds from `crictl inspect -o json`."""
    data = _loads(text)
    status = data.get("status") if isinstance(data, dict) else None
    if not isinstance(status, dict):
        return None, None
    return parse_time(status.get("startedAt")), parse_time(status.get("finishedAt"))
