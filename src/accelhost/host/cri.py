"""One look at a CRI runtime over its gRPC socket, as plain data: the live side of
`Host.cri_look`, so that a snapshot records the answers and a replay parses them the same.

What is kept is what `accelhost.containers.cri_answers` reads, nothing more: annotations,
other labels than `io.kubernetes.*` and the verbose `info` JSON (the OCI spec, with the
container's environment) but its PID are dropped here, as a snapshot travels in bug reports.

A look is bounded by one deadline for all its calls (`LOOK_TIMEOUT_S`): a socket that
accepts and never answers costs that second, once.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import time
from typing import Any

LOOK_TIMEOUT_S = 1.0
MAX_STATUSES = 512  # containers asked for their status in one look (the rest: listing only)
KEPT_LABEL_PREFIX = "io.kubernetes."
# A containerd without its CRI plugin (Docker's own) answers so
NOT_CRI = "not a CRI runtime (runtime.v1 not served)"
# copied as they are (the rest of each answer is picked below)
_VERSION_FIELDS = ("runtime_name", "runtime_version", "runtime_api_version")
_STATUS_FIELDS = ("created_at", "started_at", "finished_at", "exit_code", "reason")


def cri_look(endpoint: str, timeout: float = LOOK_TIMEOUT_S) -> dict[str, Any] | None:
    """What the runtime at `endpoint` (a `unix://` endpoint or a socket path) says, or
    `{"error": why}`; None: no such socket. crictl also takes `tcp://` and `npipe://`,
    which no local runtime uses."""
    path = endpoint.removeprefix("unix://")
    if not path.startswith("/"):
        return {"error": "not a unix socket endpoint"}
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"error": f"cannot be reached: {exc.strerror}"}
    if not stat.S_ISSOCK(mode):
        return {"error": "not a socket"}
    import grpc

    from accelhost.host.cri_api import api_pb2 as pb
    from accelhost.host.cri_api.client import connect, method, rpc

    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(0.001, deadline - time.monotonic())

    channel = connect(path)
    try:
        version = rpc(channel, "Version", pb.VersionRequest(version="v1"), left())
        pods = rpc(channel, "ListPodSandbox", pb.ListPodSandboxRequest(), left())
        listed = rpc(channel, "ListContainers", pb.ListContainersRequest(), left())
        containers = [_container(c) for c in listed.containers]
        # every status asked at once; those not back by the deadline are left out
        ask, wait = method(channel, "ContainerStatus"), left()
        pending = {
            cid: ask.future(pb.ContainerStatusRequest(container_id=cid, verbose=True), timeout=wait)
            for cid in [c["id"] for c in containers[:MAX_STATUSES]]
        }
        statuses: dict[str, Any] = {}
        for cid, future in pending.items():
            with contextlib.suppress(grpc.RpcError):  # removed since the listing, or late
                statuses[cid] = _status(future.result())
    except grpc.RpcError as exc:
        return {"error": _why(exc, timeout)}
    finally:
        channel.close()
    return {
        "version": {k: getattr(version, k) for k in _VERSION_FIELDS},
        "sandboxes": [_sandbox(p) for p in pods.items],
        "containers": containers,
        "statuses": statuses,
    }


def _labels(labels: Any) -> dict[str, str]:
    return {k: v for k, v in sorted(labels.items()) if k.startswith(KEPT_LABEL_PREFIX)}


def _sandbox(p: Any) -> dict[str, Any]:
    return {
        "id": p.id,
        "name": p.metadata.name,
        "namespace": p.metadata.namespace,
        "uid": p.metadata.uid,
        "attempt": p.metadata.attempt,
        "state": _enum_name(p, "state"),
        "created_at": p.created_at,
        "labels": _labels(p.labels),
    }


def _container(c: Any) -> dict[str, Any]:
    return {
        "id": c.id,
        "sandbox_id": c.pod_sandbox_id,
        "name": c.metadata.name,
        "attempt": c.metadata.attempt,
        "image": c.image.image,
        "image_ref": c.image_ref,
        "state": _enum_name(c, "state"),
        "created_at": c.created_at,
        "labels": _labels(c.labels),
    }


def _status(answer: Any) -> dict[str, Any]:
    s = answer.status
    return {
        "state": _enum_name(s, "state"),
        "image": s.image.image,
        **{k: getattr(s, k) for k in _STATUS_FIELDS},
        "mounts": [
            {"container_path": m.container_path, "host_path": m.host_path, "readonly": m.readonly}
            for m in s.mounts
        ],
        "pid": _pid_of(answer.info.get("info")),
    }


def _enum_name(message: Any, field: str) -> str:
    """The enum value's name (`CONTAINER_RUNNING`), or its number for one this proto lacks."""
    number = getattr(message, field)
    enum = message.DESCRIPTOR.fields_by_name[field].enum_type
    value = enum.values_by_number.get(number)
    return value.name if value is not None else str(number)


def _pid_of(info: str | None) -> int | None:
    """The container's PID 1 on the host, from the verbose `info` JSON (containerd and
    CRI-O both write `"pid"`); nothing else of it is kept."""
    if not info:
        return None
    try:
        pid = json.loads(info).get("pid")
    except (ValueError, AttributeError, RecursionError):
        return None
    return pid if type(pid) is int and pid > 0 else None


def _why(exc: Any, timeout: float) -> str:
    """One short phrase for a failed call (`exc` is a `grpc.RpcError`)."""
    import grpc

    code = exc.code()
    details = str(exc.details() or "")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within {timeout:g} s"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return NOT_CRI
    if "Failed parsing HTTP/2" in details or code == grpc.StatusCode.INTERNAL:
        return "answers something that is not the CRI's gRPC"
    if "Connection refused" in details:
        return "refused the connection (nothing listens)"
    if "Permission denied" in details:
        return "permission denied"
    name = code.name.lower() if code is not None else "failed"
    return f"{name}: {details[:120]}" if details else name
