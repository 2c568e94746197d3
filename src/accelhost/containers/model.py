"""What accelhost knows about one container (`Container`; a field that could not be known
is None, never guessed) and about all of a host's containers (`ContainerView`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

RUNNING, EXITED, GONE = "running", "exited", "gone"
NO_RUNTIME_NOTE = "name unknown: no runtime socket answered"


@dataclass(frozen=True)
class Pod:
    namespace: str | None
    name: str | None
    uid: str | None

    @property
    def label(self) -> str:
        if self.name:
            return f"{self.namespace or '?'}/{self.name}"
        return f"uid {self.uid}"


@dataclass(frozen=True)
class Container:
    runtime: str  # docker, containerd, cri-o, podman, kubernetes
    id: str  # 64 hex (a runtime's full id)
    name: str | None = None
    image: str | None = None
    state: str | None = None  # running, exited, gone (None: not known)
    pod: Pod | None = None
    started: float | None = None  # epoch seconds
    finished: float | None = None
    restarts: int | None = None  # in place (RestartCount); > 0: it ran before `started` too
    ipc_mode: str | None = None  # the runtime's word: host, private, shareable, container:ID
    pid1_command: str | None = None
    shares_host_ipc: bool | None = None  # from the namespaces of its processes (None: unseen)
    # A CRI's: the kubelet's restart count of this container (each attempt is a new
    # container, so `restarts` stays None), and the pod sandbox it runs in. A sandbox
    # itself (the pod's pause container, whose id is the sandbox's) has its own id here.
    attempt: int | None = None
    sandbox_id: str | None = None
    # the host paths a CRI runtime says are mounted into it (a pod's volumes among them)
    mounts: tuple[str, ...] = ()

    @property
    def is_sandbox(self) -> bool:
        """A pod's sandbox (pause) container: it holds the pod's namespaces, runs no
        engine, and never sees a volume mounted into one of the pod's containers."""
        return self.sandbox_id is not None and self.sandbox_id == self.id

    @property
    def short_id(self) -> str:
        return self.id[:12]

    @property
    def label(self) -> str:
        """How a person names it: `vllm-bash (docker 3f9a1c2e4b5d)`."""
        who = self.name or "name unknown"
        pod = f", pod {self.pod.label}" if self.pod else ""
        return f"{who} ({self.runtime} {self.short_id}{pod})"

    def matches(self, wanted: str) -> bool:
        """`--container NAME|ID`: its name (with or without Docker's `/`), a pod's
        `namespace/name` or pod name, or an id prefix of at least 4 characters."""
        w = wanted.strip().lstrip("/")
        pod = self.pod
        names = [
            self.name,
            *((pod.name, f"{pod.namespace}/{pod.name}") if pod and pod.name else ()),
        ]
        return bool(w) and (w in names or (len(w) >= 4 and self.id.startswith(w.lower())))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # every field, in order; the pod as a dict too


@dataclass(frozen=True)
class Namespaces:
    """A process's namespace inode numbers (None: the link could not be read) and its
    NSpid chain. Two processes share /dev/shm and System V segments exactly when their
    `ns/ipc` links match, whatever the runtime called it."""

    pid: int | None = None
    ipc: int | None = None
    mnt: int | None = None
    nspid: tuple[int, ...] = ()

    @property
    def is_namespace_init(self) -> bool:
        """PID 1 of a nested PID namespace (a container's init), not the host's PID 1."""
        return len(self.nspid) > 1 and self.nspid[-1] == 1


@dataclass(frozen=True)
class ContainerView:
    # pid -> the id of the container it is in (host processes are absent)
    pid_container: Mapping[int, str] = field(default_factory=dict)
    # id -> everything known about it: the running ones, the runtime's exited records and
    # its recently removed ones (state `gone`)
    containers: Mapping[str, Container] = field(default_factory=dict)
    namespaces: Mapping[int, Namespaces] = field(default_factory=dict)
    host_ipc: int | None = None  # PID 1's IPC namespace
    runtimes: tuple[str, ...] = ()  # which runtime sockets answered (Docker's, a CRI's)
    notes: tuple[str, ...] = ()  # said once: e.g. NO_RUNTIME_NOTE, a CRI socket's silence

    def of_pid(self, pid: int) -> Container | None:
        cid = self.pid_container.get(pid)
        return None if cid is None else self.containers.get(cid)

    def pids_of(self, container_id: str) -> list[int]:
        return sorted(p for p, c in self.pid_container.items() if c == container_id)

    def find(self, wanted: str) -> list[Container]:
        """Every container `--container wanted` names (an exact name first)."""
        exact = [c for c in self.containers.values() if c.name == wanted.lstrip("/")]
        return exact or [c for c in self.containers.values() if c.matches(wanted)]

    def known_labels(self) -> list[str]:
        return sorted(c.label for c in self.containers.values())
