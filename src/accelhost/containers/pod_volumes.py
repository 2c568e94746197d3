"""Pods' /dev/shm as the host's mount table shows it, also while none of the pod's
containers runs (between a crash and the kubelet's restart of it).

Two kinds of tmpfs hold a pod's shared memory:
- an `emptyDir` with `medium: Memory` (what vLLM's and SGLang's Kubernetes examples mount
  at /dev/shm): the kubelet mounts a tmpfs at
  `<kubelet root>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/<volume name>` and binds it
  into the containers that name it, never into the pause container;
- the sandbox's own /dev/shm, which every container of the pod shares when no volume is
  mounted there: containerd's `<state>/io.containerd.grpc.v1.cri/sandboxes/<sandbox id>/shm`
  (state `/run/containerd` by default), CRI-O's
  `/run/containers/storage/overlay-containers/<sandbox id>/userdata/shm`.

`parse_pod_mounts` is pure (mountinfo text in, typed values out); `read_pod_mounts` reads
`/proc/self/mountinfo` through the host door (PID 1's is unreadable in many sandboxes; a
DaemonSet sees the host's pods through a hostPath of the kubelet root with
`mountPropagation: HostToContainer`, and names that root with `--kubelet-root`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace

from accelhost.host.base import Host

DEFAULT_KUBELET_ROOT = "/var/lib/kubelet"
DEFAULT_CONTAINERD_STATE = "/run/containerd"
CRIO_RUNROOT = "/run/containers/storage"
MOUNTINFO = "/proc/self/mountinfo"
EMPTY_DIR = "kubernetes.io~empty-dir"
_OCTAL = re.compile(r"\\([0-7]{3})")
_HEX64 = "[0-9a-f]{64}"
_DEV = re.compile(r"^(\d{1,10}):(\d{1,10})$")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: what `mount_point` shows, and the filesystem's device id
    (`dev`, as `stat` gives it for every file on it)."""

    mount_id: int
    dev: int
    root: str
    mount_point: str
    fstype: str
    source: str
    options: frozenset[str] = frozenset()  # super options: a v1 cgroup's controllers


@dataclass(frozen=True)
class PodVolume:
    """A pod's memory-backed emptyDir, by the pod's uid and the volume's name."""

    pod_uid: str
    name: str
    mount_point: str
    dev: int


@dataclass(frozen=True)
class SandboxShm:
    """A pod sandbox's own /dev/shm, by the sandbox's id (the pause container's)."""

    sandbox_id: str
    runtime: str  # containerd, cri-o
    mount_point: str
    dev: int


@dataclass(frozen=True)
class PodMounts:
    volumes: tuple[PodVolume, ...] = ()
    sandbox_shms: tuple[SandboxShm, ...] = ()
    notes: tuple[str, ...] = ()  # said once: e.g. a kubelet root that does not exist


def unescape(field: str) -> str:
    """mountinfo's octal escapes (`\\040` a blank, `\\011` a tab, `\\012`, `\\134`)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """Every well-formed line of /proc/PID/mountinfo (see proc(5)); others are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split(" ")
        try:
            dash = parts.index("-", 6)
        except ValueError:
            continue
        if len(parts) < dash + 3 or not parts[0].isdigit():
            continue
        dev = _DEV.match(parts[2])
        if dev is None:
            continue
        out.append(
            Mount(
                mount_id=int(parts[0]),
                dev=os.makedev(int(dev.group(1)), int(dev.group(2))),
                root=unescape(parts[3]),
                mount_point=unescape(parts[4]),
                fstype=parts[dash + 1],
                source=unescape(parts[dash + 2]),
                options=frozenset(parts[dash + 3].split(",") if len(parts) > dash + 3 else ()),
            )
        )
    return out


def parse_pod_mounts(
    text: str,
    kubelet_root: str = DEFAULT_KUBELET_ROOT,
    containerd_state: str = DEFAULT_CONTAINERD_STATE,
) -> PodMounts:
    """Pods' emptyDir tmpfs volumes and sandbox shm mounts in a mount table. A mount point
    listed twice (mounted over, or seen through two binds) counts once, its last line."""

    def below(root: str, shape: str) -> re.Pattern[str]:
        return re.compile(re.escape(root.rstrip("/")) + shape)

    volume = below(kubelet_root, rf"/pods/([^/]+)/volumes/{re.escape(EMPTY_DIR)}/([^/]+)")
    containerd = below(
        containerd_state, rf"/io\.containerd\.grpc\.v1\.cri/sandboxes/({_HEX64})/shm"
    )
    crio = below(CRIO_RUNROOT, rf"/overlay-containers/({_HEX64})/userdata/shm")
    sandboxes = (("containerd", containerd), ("cri-o", crio))
    volumes: dict[str, PodVolume] = {}
    shms: dict[str, SandboxShm] = {}
    for m in parse_mountinfo(text):
        if m.fstype != "tmpfs":
            continue
        if found := volume.fullmatch(m.mount_point):
            volumes[m.mount_point] = PodVolume(found[1], found[2], m.mount_point, m.dev)
        for runtime, shape in sandboxes:
            if found := shape.fullmatch(m.mount_point):
                shms[m.mount_point] = SandboxShm(found[1], runtime, m.mount_point, m.dev)
    return PodMounts(tuple(volumes.values()), tuple(shms.values()))


def read_pod_mounts(host: Host, kubelet_root: str | None = None) -> PodMounts:
    """`parse_pod_mounts` of this host's mount table. `kubelet_root` None: the usual one,
    silently absent on a host without a kubelet; one that was named and is no directory
    is said in `notes`. No mount table (a snapshot without it): nothing found, said where
    a root was named."""
    root = (kubelet_root or DEFAULT_KUBELET_ROOT).rstrip("/") or "/"
    notes = []
    if kubelet_root is not None:
        found = host.stat(root)
        if found is None or found.kind != "dir":
            notes.append(f"kubelet root {root}: no such directory")
    text = host.read_file(MOUNTINFO)
    if text is None:  # said where a kubelet root was named: elsewhere, likely no kubelet
        said = () if kubelet_root is None else (f"{MOUNTINFO} not read: pods' volumes not seen",)
        return PodMounts(notes=(*notes, *said))
    return replace(parse_pod_mounts(text, root), notes=tuple(notes))
