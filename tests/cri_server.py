"""A real CRI runtime stand-in for the tests: grpc's own server on a unix socket of its
own, serving `runtime.v1.RuntimeService` with accelhost's generated messages, and sockets
that accept and never answer, or answer bytes that are not gRPC.

The pods and containers it serves are what the test puts in `FakeCri`; ContainerStatus
(verbose) answers an `info` JSON shaped as containerd's (the pid, and an OCI spec holding
the container's environment, which a recording must not keep).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from accelhost.host.cri_api import api_pb2 as pb

SECRET_ENV = "HF_TOKEN=hf_do_not_record"
NS = 1_000_000_000


@dataclass
class FakePod:
    id: str
    name: str
    namespace: str
    uid: str
    ready: bool = True
    created_s: int = 1_796_000_000


@dataclass
class FakeContainer:
    id: str
    pod: FakePod
    name: str
    attempt: int
    running: bool
    started_s: int
    finished_s: int = 0
    pid: int = 0
    image: str = "vllm/vllm-openai:v0.32"
    mounts: list[tuple[str, str]] = field(default_factory=list)  # (container path, host path)


@dataclass
class FakeCri:
    pods: list[FakePod] = field(default_factory=list)
    containers: list[FakeContainer] = field(default_factory=list)
    name: str = "containerd"
    version: str = "1.6.20"
    calls: list[str] = field(default_factory=list)

    def _labels(self, c: FakeContainer | None, pod: FakePod) -> dict[str, str]:
        labels = {
            "io.kubernetes.pod.name": pod.name,
            "io.kubernetes.pod.namespace": pod.namespace,
            "io.kubernetes.pod.uid": pod.uid,
            "team": "serving",
        }
        if c is not None:
            labels["io.kubernetes.container.name"] = c.name
        return labels

    def Version(self, request: pb.VersionRequest, context: Any) -> pb.VersionResponse:
        return pb.VersionResponse(
            version="0.1.0",
            runtime_name=self.name,
            runtime_version=self.version,
            runtime_api_version="v1",
        )

    def ListPodSandbox(self, request: Any, context: Any) -> pb.ListPodSandboxResponse:
        return pb.ListPodSandboxResponse(
            items=[
                pb.PodSandbox(
                    id=p.id,
                    metadata=pb.PodSandboxMetadata(
                        name=p.name, uid=p.uid, namespace=p.namespace, attempt=0
                    ),
                    state=pb.SANDBOX_READY if p.ready else pb.SANDBOX_NOTREADY,
                    created_at=p.created_s * NS,
                    labels=self._labels(None, p),
                    annotations={"kubectl.kubernetes.io/last-applied-configuration": SECRET_ENV},
                )
                for p in self.pods
            ]
        )

    def ListContainers(self, request: Any, context: Any) -> pb.ListContainersResponse:
        return pb.ListContainersResponse(
            containers=[
                pb.Container(
                    id=c.id,
                    pod_sandbox_id=c.pod.id,
                    metadata=pb.ContainerMetadata(name=c.name, attempt=c.attempt),
                    image=pb.ImageSpec(image="sha256:" + "ab" * 32),
                    state=pb.CONTAINER_RUNNING if c.running else pb.CONTAINER_EXITED,
                    created_at=c.started_s * NS - NS,
                    labels=self._labels(c, c.pod),
                )
                for c in self.containers
            ]
        )

    def ContainerStatus(self, request: Any, context: Any) -> pb.ContainerStatusResponse:
        c = next((c for c in self.containers if c.id == request.container_id), None)
        if c is None:
            context.abort(grpc.StatusCode.NOT_FOUND, "no such container")
        info = {"pid": c.pid, "runtimeSpec": {"process": {"env": [SECRET_ENV]}}}
        return pb.ContainerStatusResponse(
            status=pb.ContainerStatus(
                id=c.id,
                metadata=pb.ContainerMetadata(name=c.name, attempt=c.attempt),
                state=pb.CONTAINER_RUNNING if c.running else pb.CONTAINER_EXITED,
                created_at=c.started_s * NS - NS,
                started_at=c.started_s * NS + 250_000_000,
                finished_at=c.finished_s * NS,
                exit_code=0 if c.running else 137,
                image=pb.ImageSpec(image=c.image),
                mounts=[pb.Mount(container_path=a, host_path=b) for a, b in c.mounts],
            ),
            info={"info": json.dumps(info)} if request.verbose else {},
        )


_REQUESTS = {
    "Version": pb.VersionRequest,
    "ListPodSandbox": pb.ListPodSandboxRequest,
    "ListContainers": pb.ListContainersRequest,
    "ContainerStatus": pb.ContainerStatusRequest,
}


@contextlib.contextmanager
def _folder() -> Iterator[Path]:
    # AF_UNIX paths are limited to about 107 bytes: a short private directory under /tmp
    folder = Path(tempfile.mkdtemp(prefix="ahcri", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def cri_server(fake: FakeCri, service: str = "runtime.v1.RuntimeService") -> Iterator[str]:
    """Serve `fake` on a fresh unix socket until the block ends; yields the socket's path.
    `service`: another name serves the same methods where no CRI client looks."""

    def handler(name: str) -> Any:
        method = getattr(fake, name)

        def call(request: Any, context: Any) -> Any:
            fake.calls.append(name)
            return method(request, context)

        return grpc.unary_unary_rpc_method_handler(
            call,
            request_deserializer=_REQUESTS[name].FromString,
            response_serializer=lambda m: m.SerializeToString(),
        )

    generic = grpc.method_handlers_generic_handler(service, {n: handler(n) for n in _REQUESTS})
    with _folder() as folder:
        path = str(folder / "cri.sock")
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((generic,))
        server.add_insecure_port("unix://" + path)
        server.start()
        try:
            yield path
        finally:
            server.stop(None).wait(5)


@contextlib.contextmanager
def silent_socket() -> Iterator[str]:
    """A socket that takes connections (the kernel's backlog) and never says a byte."""
    with _folder() as folder:
        path = str(folder / "silent.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            srv.bind(path)
            srv.listen(16)
            yield path
        finally:
            srv.close()


@contextlib.contextmanager
def garbage_socket(answer: bytes = b"\x00\xffnot http/2 at all\r\n" * 8) -> Iterator[str]:
    """A socket that answers every connection with `answer` and closes it."""
    with _folder() as folder:
        path = str(folder / "garbage.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(16)
        srv.settimeout(0.1)
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = srv.accept()
                except OSError:
                    continue
                with conn, contextlib.suppress(OSError):
                    conn.settimeout(2)
                    conn.recv(4096)
                    conn.sendall(answer)

        thread = threading.Thread(target=loop, daemon=True)
        thread.start()
        try:
            yield path
        finally:
            stop.set()
            thread.join(timeout=5)
            srv.close()
