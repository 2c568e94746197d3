"""Calling a CRI runtime's methods by name, with the generated messages.

A channel to a unix socket is what grpc itself makes from a `unix://` target:

    import grpc
    channel = grpc.insecure_channel("unix:///run/containerd/containerd.sock")

`connect` does that for a path given either way (`/run/x.sock` or `unix:///run/x.sock`, as
`CONTAINER_RUNTIME_ENDPOINT` holds it). Then, for example:

    from accelhost.host.cri_api import api_pb2
    from accelhost.host.cri_api.client import connect, rpc

    with connect("/run/containerd/containerd.sock") as channel:
        answer = rpc(channel, "ListContainers", api_pb2.ListContainersRequest(), timeout=1.0)

`rpc` raises grpc's own `grpc.RpcError` (its `.code()` says DEADLINE_EXCEEDED for a silent
socket, UNAVAILABLE for a missing one, UNIMPLEMENTED for a wrong service): a caller that
speaks to users turns it into one line (`accelhost.host.cri` does).
"""

from __future__ import annotations

from typing import TypeVar, cast

import grpc
from google.protobuf.message import Message

from accelhost.host.cri_api import api_pb2

RUNTIME_SERVICE = "runtime.v1.RuntimeService"
IMAGE_SERVICE = "runtime.v1.ImageService"

# method name -> (service, response type); the request's type is the caller's message
_METHODS: dict[str, tuple[str, type[Message]]] = {
    "Version": (RUNTIME_SERVICE, api_pb2.VersionResponse),
    "RunPodSandbox": (RUNTIME_SERVICE, api_pb2.RunPodSandboxResponse),
    "StopPodSandbox": (RUNTIME_SERVICE, api_pb2.StopPodSandboxResponse),
    "RemovePodSandbox": (RUNTIME_SERVICE, api_pb2.RemovePodSandboxResponse),
    "PodSandboxStatus": (RUNTIME_SERVICE, api_pb2.PodSandboxStatusResponse),
    "ListPodSandbox": (RUNTIME_SERVICE, api_pb2.ListPodSandboxResponse),
    "CreateContainer": (RUNTIME_SERVICE, api_pb2.CreateContainerResponse),
    "StartContainer": (RUNTIME_SERVICE, api_pb2.StartContainerResponse),
    "StopContainer": (RUNTIME_SERVICE, api_pb2.StopContainerResponse),
    "RemoveContainer": (RUNTIME_SERVICE, api_pb2.RemoveContainerResponse),
    "ListContainers": (RUNTIME_SERVICE, api_pb2.ListContainersResponse),
    "ContainerStatus": (RUNTIME_SERVICE, api_pb2.ContainerStatusResponse),
    "ListImages": (IMAGE_SERVICE, api_pb2.ListImagesResponse),
}

M = TypeVar("M", bound=Message)


def target(endpoint: str) -> str:
    """grpc's target for a socket path or a `unix://` endpoint (crictl's form)."""
    if endpoint.startswith("unix://"):
        return endpoint
    if endpoint.startswith("/"):
        return "unix://" + endpoint
    raise ValueError(f"not a unix socket endpoint: {endpoint!r}")


def connect(endpoint: str) -> grpc.Channel:
    """A channel to the runtime at `endpoint`; nothing is sent until the first call."""
    return grpc.insecure_channel(target(endpoint))


def method_path(name: str) -> str:
    """`/runtime.v1.RuntimeService/ListContainers` for `ListContainers`."""
    service, _ = _METHODS[name]
    return f"/{service}/{name}"


def rpc(channel: grpc.Channel, name: str, request: Message, timeout: float) -> Message:
    """Call CRI method `name` once; the answer is parsed into the method's response type.

    `timeout` bounds the whole call (connecting included), so a socket that accepts and
    never answers costs at most that long.
    """
    service, response_type = _METHODS[name]
    call = channel.unary_unary(
        f"/{service}/{name}",
        request_serializer=lambda message: message.SerializeToString(),
        response_deserializer=response_type.FromString,
    )
    return cast(Message, call(request, timeout=timeout))


def typed_rpc(
    channel: grpc.Channel, name: str, request: Message, response: type[M], timeout: float
) -> M:
    """`rpc`, with the response's type said by the caller so a type checker sees it."""
    answer = rpc(channel, name, request, timeout)
    if not isinstance(answer, response):
        raise TypeError(f"{name} answers {type(answer).__name__}, not {response.__name__}")
    return answer
