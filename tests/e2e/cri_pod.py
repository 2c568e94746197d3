"""The kubelet's part for one pod on the suite's CRI node (tests/e2e/cri_node.py).

It does what the kubelet does for a pod with one container and an `emptyDir` (medium
Memory) at /dev/shm, as vLLM's and SGLang's Kubernetes examples have it, through the CRI
API (`runtime.v1.RuntimeService`, accelhost's own generated messages):

- the emptyDir: a tmpfs mounted on the host at the kubelet's own path,
  `<kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`, before the pod runs;
  and a second emptyDir on disk (a plain folder there) at /root/.cache, where vLLM keeps
  its compile cache: each attempt is a new container with a fresh root filesystem, and a
  restarted attempt reuses what the crashed one compiled, as in a pod that has such a
  volume (it saves about a minute of each restart here);
- `RunPodSandbox`: host network (no CNI here; such a sandbox sets no hostname), the
  container's own PID namespace, the pod's IPC namespace, `cgroup_parent`
  `/kubepods/<qos>/pod<uid>` (cgroupfs driver), the `io.kubernetes.pod.*` labels;
- `CreateContainer` + `StartContainer` with `metadata.attempt` = the restart count: 0,
  then one more after each crash (a new container; the exited one stays until the pod
  goes, as the kubelet keeps the last dead one), labels `io.kubernetes.container.name` and
  the pod's, its log at `<pod log dir>/<name>/<attempt>.log`;
- at the end `StopPodSandbox`, `RemovePodSandbox`, the emptyDir unmounted, the pod's
  folder removed.

The container is the engine's image (empty) with the host's system folders, Python and
virtualenv, the repository's src and the model bind-mounted read-only, and vLLM's API
server as its command: the container's PID 1 is the API server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cri_images import ENGINE_IMAGE
from cri_node import Node
from docker_daemon import host_paths
from docker_vllm import engine_env
from engine import READY_TIMEOUT_S, free_port, vllm_argv
from procs import Tracked, wait_for

EMPTY_DIR_SIZE = "1g"
# CRI enums (k8s.io/cri-api runtime.v1): NamespaceMode, ContainerState.
POD, CONTAINER, NODE = 0, 1, 2
CREATED, RUNNING, EXITED = 0, 1, 2


def api() -> Any:
    """accelhost's generated CRI messages (imported late: grpc is needed only here)."""
    from accelhost.host.cri_api import api_pb2

    return api_pb2


@dataclass
class Cri:
    """RuntimeService calls on one socket (accelhost's `cri.client`), each bounded in time."""

    endpoint: str  # unix:///...
    channel: Any = None

    def call(self, method: str, request: Any, timeout: float = 60.0) -> Any:
        from accelhost.host.cri_api.client import connect, rpc

        if self.channel is None:
            self.channel = connect(self.endpoint)
        return rpc(self.channel, method, request, timeout)

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()


@dataclass
class Attempt:
    """One container of the pod: one attempt (restart count) of the engine."""

    id: str
    attempt: int
    port: int
    started: float  # time.monotonic() at StartContainer
    ready_after_s: float | None = None


@dataclass
class Pod:
    node: Node
    cri: Cri
    namespace: str
    name: str
    uid: str
    qos: str = "burstable"
    volume: str = "dshm"
    container: str = "vllm"
    # the sandbox's NamespaceOption (network, pid, ipc): the engine's pod shares only its
    # IPC namespace among its containers; a DaemonSet's hostPID/hostIPC pod says NODE
    namespaces: tuple[int, int, int] = (NODE, CONTAINER, POD)
    empty_dir_size: str | None = EMPTY_DIR_SIZE  # None: no emptyDir (nor cache volume)
    sandbox_id: str | None = None
    attempts: list[Attempt] = field(default_factory=list)
    tracked: Tracked = field(default_factory=Tracked)

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def cgroup_parent(self) -> str:
        return f"/kubepods/{self.qos}/pod{self.uid}"

    @property
    def empty_dir(self) -> Path:
        return (self.node.kubelet_root / "pods" / self.uid / "volumes"
                / "kubernetes.io~empty-dir" / self.volume)  # fmt: skip

    @property
    def cache_dir(self) -> Path:
        return self.empty_dir.parent / "cache"

    @property
    def log_dir(self) -> Path:
        return self.node.root / "logs" / f"{self.namespace}_{self.name}_{self.uid}"

    def pod_labels(self) -> dict[str, str]:
        return {
            "io.kubernetes.pod.name": self.name,
            "io.kubernetes.pod.namespace": self.namespace,
            "io.kubernetes.pod.uid": self.uid,
        }

    def sandbox_config(self) -> Any:
        pb = api()
        network, pid, ipc = self.namespaces
        ns = pb.NamespaceOption(network=network, pid=pid, ipc=ipc)
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(
                name=self.name, uid=self.uid, namespace=self.namespace, attempt=0
            ),
            log_directory=str(self.log_dir),
            labels={**self.pod_labels(), "app": self.name},
            annotations={"kubernetes.io/config.source": "api"},
            linux=pb.LinuxPodSandboxConfig(
                cgroup_parent=self.cgroup_parent,
                security_context=pb.LinuxSandboxSecurityContext(namespace_options=ns),
            ),
        )

    # -- life -------------------------------------------------------------------------
    def run(self) -> None:
        """The emptyDir first (the kubelet mounts volumes before the sandbox), then the
        sandbox."""
        if self.empty_dir_size is not None:
            self.empty_dir.mkdir(parents=True)
            self.cache_dir.mkdir()
            size = f"size={self.empty_dir_size}"
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", size, "tmpfs", str(self.empty_dir)],
                                  capture_output=True, text=True, check=False)  # fmt: skip
            assert done.returncode == 0, f"mounting the emptyDir: {done.stderr}"
        self.log_dir.mkdir(parents=True)
        request = api().RunPodSandboxRequest(config=self.sandbox_config())
        self.sandbox_id = str(self.cri.call("RunPodSandbox", request).pod_sandbox_id)

    def start_engine(self, model: Path) -> Attempt:
        """A new container: attempt N+1 after N (the kubelet's restart count), started."""
        pb = api()
        number = len(self.attempts)
        port = self.attempts[-1].port if self.attempts else free_port()
        mounts = [pb.Mount(container_path=p, host_path=p, readonly=True)
                  for p in host_paths(model, system=("/usr", "/lib", "/lib64", "/bin",
                                                          "/sbin", "/etc"))]  # fmt: skip
        mounts.append(pb.Mount(container_path="/dev/shm", host_path=str(self.empty_dir)))
        mounts.append(pb.Mount(container_path="/root/.cache", host_path=str(self.cache_dir)))
        (self.log_dir / self.container).mkdir(exist_ok=True)
        config = pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=self.container, attempt=number),
            image=pb.ImageSpec(image=ENGINE_IMAGE),
            command=vllm_argv(model, port),
            envs=[pb.KeyValue(key=k, value=v.encode()) for k, v in engine_env().items()],
            mounts=mounts,
            labels={**self.pod_labels(), "io.kubernetes.container.name": self.container},
            annotations={"io.kubernetes.container.restartCount": str(number)},
            log_path=f"{self.container}/{number}.log",
            linux=pb.LinuxContainerConfig(
                security_context=pb.LinuxContainerSecurityContext(
                    namespace_options=pb.NamespaceOption(network=NODE, pid=CONTAINER, ipc=POD)
                )
            ),
        )
        created = self.cri.call(
            "CreateContainer",
            pb.CreateContainerRequest(
                pod_sandbox_id=self.sandbox_id, config=config, sandbox_config=self.sandbox_config()
            ),
        )
        attempt = Attempt(str(created.container_id), number, port, time.monotonic())
        self.attempts.append(attempt)
        self.cri.call("StartContainer", pb.StartContainerRequest(container_id=attempt.id))
        self.pids()
        return attempt

    def status(self, container_id: str) -> tuple[Any, dict[str, Any]]:
        """ContainerStatus (verbose: `info` holds the runtime's JSON, with the pid)."""
        reply = self.cri.call(
            "ContainerStatus", api().ContainerStatusRequest(container_id=container_id, verbose=True)
        )
        info: dict[str, Any] = {}
        with contextlib.suppress(KeyError, ValueError):
            info = json.loads(reply.info["info"])
        return reply.status, info

    def pid1(self, attempt: Attempt) -> int:
        status, info = self.status(attempt.id)
        assert status.state == RUNNING, f"{self.ref} attempt {attempt.attempt}: {status}"
        pid = int(info["pid"])
        self.tracked.add([pid])
        return pid

    def pids(self) -> set[int]:
        """The pod's live processes (its cgroups name pod<uid>), recorded with start times."""
        found = set()
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    if f"/pod{self.uid}/" in Path(f"/proc/{name}/cgroup").read_text():
                        found.add(int(name))
        self.tracked.add(found)
        return {p for p in found if self.tracked.is_alive(p)}

    def url(self, attempt: Attempt, path: str) -> str:
        return f"http://127.0.0.1:{attempt.port}{path}"

    def answers(self, attempt: Attempt, model: Path) -> bool:
        """One completion of 4 tokens, as a user checks that a server works."""
        body = json.dumps({"model": str(model), "prompt": "hello world", "max_tokens": 4})
        req = urllib.request.Request(
            self.url(attempt, "/v1/completions"),
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            answer = json.load(resp)
        return bool(answer.get("usage", {}).get("completion_tokens") == 4)

    def wait_ready(self, attempt: Attempt, timeout: float = READY_TIMEOUT_S) -> None:
        def ready() -> bool:
            self.pids()
            status, _ = self.status(attempt.id)
            if status.state != RUNNING:
                raise AssertionError(
                    f"{self.ref} attempt {attempt.attempt} stopped (exit {status.exit_code}, "
                    f"{status.reason}) before it answered\n{self.log_tail(attempt)}"
                )
            try:
                with urllib.request.urlopen(self.url(attempt, "/v1/models"), timeout=5) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(f"{self.ref} attempt {attempt.attempt} to answer", ready, timeout, every=1.0)
        attempt.ready_after_s = time.monotonic() - attempt.started

    def wait_exited(self, attempt: Attempt, timeout: float = 60) -> Any:
        def exited() -> Any:
            status, _ = self.status(attempt.id)
            return status if status.state == EXITED else None

        return wait_for(f"{self.ref} attempt {attempt.attempt} to exit", exited, timeout)

    def files(self) -> set[str]:
        """What is in the emptyDir now, as host paths."""
        return {str(self.empty_dir / n) for n in os.listdir(self.empty_dir)}

    def log_tail(self, attempt: Attempt, lines: int = 40) -> str:
        path = self.log_dir / self.container / f"{attempt.attempt}.log"
        text = path.read_text(errors="replace") if path.exists() else "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Stop and remove the sandbox (and so every container), kill what is left of the
        pod's processes, unmount the emptyDir, remove the pod's folders."""
        pb = api()
        with contextlib.suppress(Exception):
            self.pids()
        if self.sandbox_id is not None:
            for method, request in (
                ("StopPodSandbox", pb.StopPodSandboxRequest(pod_sandbox_id=self.sandbox_id)),
                ("RemovePodSandbox", pb.RemovePodSandboxRequest(pod_sandbox_id=self.sandbox_id)),
            ):
                with contextlib.suppress(Exception):
                    self.cri.call(method, request, timeout=60)
        with contextlib.suppress(AssertionError):
            wait_for(f"{self.ref}'s processes to go", lambda: not self.tracked.alive(), 30)
        self.tracked.kill_all()
        if self.node.keep_logs is not None and self.log_dir.is_dir():
            shutil.copytree(
                self.log_dir, self.node.keep_logs / self.log_dir.name, dirs_exist_ok=True
            )
        if self.empty_dir.is_mount():
            done = subprocess.run(["umount", str(self.empty_dir)], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", str(self.empty_dir)], check=False)
        shutil.rmtree(self.node.kubelet_root / "pods" / self.uid, ignore_errors=True)
        self.cri.close()


def make_pod(node: Node, namespace: str, name: str, **spec: Any) -> Pod:
    """A pod with a fresh uid (`spec`: Pod's fields); its clean-up is registered with the
    node before it runs."""
    pod = Pod(node, Cri(node.endpoint), namespace, name, str(uuid.uuid4()), **spec)
    node.closers.append(pod.close)
    pod.run()
    return pod
