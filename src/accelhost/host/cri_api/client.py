"""Calling a CRI runtime's methods by name, with the generated messages. For example:

    from accelhost.host.cri_api import api_pb2
    from accelhost.host.cri_api.client import connect, rpc

    with connect("/run/containerd/containerd.sock") as channel:
        answer = rpc(channel, "ListContainers", api_pb2.ListContainersRequest(), timeout=1.0)

`rpc` raises grpc's own `grpc.RpcError` (its `.code()` says DEADLINE_EXCEEDED for a silent
socket, UNAVAILABLE for a missing one, UNIMPLEMENTED for a wrong service): a caller that
speaks to users turns it into one line (`accelhost.host.cri` does).
"""

from __future__ import annotations

from typing import Any, cast

import grpc
from google.protobuf.message import Message

from accelhost.host.cri_api import api_pb2

# Each method's path and response type, as api.proto's services declare them.
_METHODS: dict[str, tuple[str, type[Message]]] = {
    m.name: (f"/{service.full_name}/{m.name}", getattr(api_pb2, m.output_type.name))
    for service in api_pb2.DESCRIPTOR.services_by_name.values()
    for m in service.methods
}


def connect(endpoint: str) -> grpc.Channel:
    """A channel to the runtime at a socket path or a `unix://` endpoint (crictl's form, as
    `CONTAINER_RUNTIME_ENDPOINT` holds it); nothing is sent until the first call."""
    if endpoint.startswith("/"):
        endpoint = "unix://" + endpoint
    if not endpoint.startswith("unix://"):
        raise ValueError(f"not a unix socket endpoint: {endpoint!r}")
    return grpc.insecure_channel(endpoint)


def method(channel: grpc.Channel, name: str) -> Any:
    """CRI method `name` on `channel`, to call (or `.future()`) with a request and a
    `timeout`; its answer is parsed into the method's response type."""
    path, response_type = _METHODS[name]
    return channel.unary_unary(
        path,
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=response_type.FromString,
    )


def rpc(channel: grpc.Channel, name: str, request: Message, timeout: float) -> Message:
    """Call CRI method `name` once. `timeout` bounds the whole call (connecting included),
    so a socket that accepts and never answers costs at most that long."""
    return cast(Message, method(channel, name)(request, timeout=timeout))
