"""Put fake processes into fake containers: each runtime's cgroup shape, namespaces, NSpid,
and a runtime's API answers on its socket (for `FakeMachine` and the hygiene `FakeHost`,
anything with `files`, `links` and `http` or a snapshot's sections)."""

from __future__ import annotations

import json
from typing import Any, Protocol

HOST_IPC, HOST_PID, HOST_MNT = 4026531839, 4026531836, 4026531841
DOCKER_SOCK = "/var/run/docker.sock"
LIST = "/containers/json?all=1"


def cid(n: int) -> str:
    """A container id: 64 hex digits, distinct per n."""
    return f"{n:02x}" * 32


class HasProcFiles(Protocol):
    files: dict[str, str]
    links: dict[str, str]


# Every runtime's cgroup path for container `c` (pod uid `u` where it has one).
SHAPES: dict[str, str] = {
    "docker-cgroupfs": "/docker/{c}",
    "docker-systemd": "/system.slice/docker-{c}.scope",
    "containerd-k8s-systemd": (
        "/kubepods.slice/kubepods-burstable.slice/"
        "kubepods-burstable-pod{u_}.slice/cri-containerd-{c}.scope"
    ),
    "k8s-cgroupfs": "/kubepods/besteffort/pod{u}/{c}",
    "k8s-guaranteed-cgroupfs": "/kubepods/pod{u}/{c}",
    "crio-systemd": "/kubepods.slice/kubepods-pod{u_}.slice/crio-{c}.scope",
    "podman-user": (
        "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{c}.scope/container"
    ),
    "podman-machine": "/machine.slice/libpod-{c}.scope",
    # Quadlet (podman --cgroups=split): the container inside its systemd unit's cgroup
    "podman-quadlet": "/system.slice/vllm.service/libpod-payload-{c}",
}


def cgroup_text(path: str, v1: bool = False) -> str:
    if not v1:
        return f"0::{path}\n"
    lines = [f"{n}:{ctl}:{path}" for n, ctl in enumerate(("cpuset", "cpu,cpuacct", "memory"), 2)]
    return "12:pids:/\n" + "\n".join(lines) + "\n1:name=systemd:" + path + "\n0::/\n"


def put_in_container(
    fake: HasProcFiles,
    pid: int,
    cgroup_path: str,
    *,
    ipc: int = HOST_IPC,
    pid_ns: int = 4026532200,
    mnt: int = 4026532201,
    nspid: tuple[int, ...] | None = None,
    v1: bool = False,
) -> None:
    fake.files[f"/proc/{pid}/cgroup"] = cgroup_text(cgroup_path, v1)
    fake.links[f"/proc/{pid}/ns/ipc"] = f"ipc:[{ipc}]"
    fake.links[f"/proc/{pid}/ns/pid"] = f"pid:[{pid_ns}]"
    fake.links[f"/proc/{pid}/ns/mnt"] = f"mnt:[{mnt}]"
    status = fake.files.get(f"/proc/{pid}/status", f"Name:\tx\nPid:\t{pid}\n")
    chain = nspid if nspid is not None else (pid, pid)
    fake.files[f"/proc/{pid}/status"] = status + "NSpid:\t" + "\t".join(map(str, chain)) + "\n"


def on_host(fake: HasProcFiles, pid: int) -> None:
    fake.files[f"/proc/{pid}/cgroup"] = "0::/init.scope\n" if pid == 1 else "0::/user.slice\n"
    fake.links[f"/proc/{pid}/ns/ipc"] = f"ipc:[{HOST_IPC}]"
    fake.links[f"/proc/{pid}/ns/pid"] = f"pid:[{HOST_PID}]"
    fake.links[f"/proc/{pid}/ns/mnt"] = f"mnt:[{HOST_MNT}]"


def docker_listing(*containers: dict[str, Any]) -> str:
    return json.dumps(
        [
            {
                "Id": c["id"],
                "Names": ["/" + c["name"]],
                "Image": c.get("image", "vllm-cpu:local"),
                "State": c.get("state", "running"),
                "Labels": c.get("labels", {}),
            }
            for c in containers
        ]
    )


def docker_inspect(c: dict[str, Any]) -> str:
    return json.dumps(
        {
            "Id": c["id"],
            "Name": "/" + c["name"],
            "Path": c.get("path", "bash"),
            "Args": c.get("args", ["-lc", "vllm serve /models/tiny"]),
            "RestartCount": c.get("restarts", 0),
            "State": {
                "Status": c.get("state", "running"),
                "Pid": c.get("pid", 0),
                "StartedAt": c.get("started", "2026-12-01T10:00:00.123456789Z"),
                "FinishedAt": c.get("finished", "0001-01-01T00:00:00Z"),
            },
            "HostConfig": {"IpcMode": c.get("ipc", "host")},
            "Config": {"Image": c.get("image", "vllm-cpu:local"), "Labels": c.get("labels", {})},
        }
    )


def docker_answers(
    http: dict[str, str],
    containers: list[dict[str, Any]],
    events: list[dict[str, Any]] | None = None,
    events_path: str | None = None,
    sock: str = DOCKER_SOCK,
) -> None:
    """What a Docker daemon answers on `sock` for these containers (and events)."""
    http[f"{sock} {LIST}"] = docker_listing(*containers)
    for c in containers:
        http[f"{sock} /containers/{c['id']}/json"] = docker_inspect(c)
    if events_path is not None:
        http[f"{sock} {events_path}"] = "".join(json.dumps(e) + "\n" for e in events or [])


def event(action: str, container_id: str, name: str, when: float) -> dict[str, Any]:
    return {
        "Type": "container",
        "Action": action,
        "status": action,
        "id": container_id,
        "Actor": {"ID": container_id, "Attributes": {"name": name, "image": "vllm-cpu:local"}},
        "time": int(when),
        "timeNano": int(when * 1e9),
    }
