"""Which container a process is in, from the text of /proc/PID/cgroup (pure).

Every runtime puts a container's processes in a cgroup whose path names the container's
64-hex id, each in its own shape (cgroup v1: every hierarchy line; v2: the `0::` line):

- Docker: `/docker/<id>` (cgroupfs driver), `.../docker-<id>.scope` (systemd driver);
- containerd under Kubernetes: `.../cri-containerd-<id>.scope`; nerdctl `nerdctl-<id>.scope`;
- CRI-O: `.../crio-<id>.scope` (`crio-conmon-<id>.scope` is its monitor, on the host);
- Podman: `.../libpod-<id>.scope` or `/machine.slice/libpod-<id>.scope`, under Quadlet
  (`--cgroups=split`) `.../<unit>.service/libpod-payload-<id>` (`libpod-conmon-<id>.scope`
  and, for a pod on cgroupfs, `/libpod_parent/<pod id>/conmon` are its monitor);
- a Kubernetes pod: `kubepods[-<qos>].slice/kubepods-<qos>-pod<uid with _>.slice/...`
  (systemd; under a custom cgroup root `<root>-kubepods-...`) or `/kubepods/<qos>/pod<uid>/<id>`
  (cgroupfs), Guaranteed pods without the QoS level; the runtime's own scope (above) inside
  it says which runtime, a bare id does not (then the runtime is `kubernetes`);
- containerd's own default (nerdctl, cgroupfs): `/default/<id>`;
- a bare id under any other parent (`--cgroup-parent` with cgroupfs: Docker, nerdctl) names
  no runtime: runtime "" here, a container only where a runtime that answers lists the id;
- LXC and LXD, by name: `lxc.payload.<name>` (4.0+), `/lxc.payload/<name>` (3.1), `/lxc/<name>`
  (older); `<name>-<n>` is also LXC's retry of `<name>` when its cgroup existed: not named;
- systemd-nspawn, by name: `machine-<name>.scope/payload` or
  `systemd-nspawn@<name>.service/payload` (a unified hierarchy; `supervisor` is nspawn itself,
  and a scope without `payload` may as well be a VM's: not named).

A reader in a cgroup namespace of its own (a pod's, on cgroup v2) sees other paths
relative to its root (`/../../besteffort/pod<uid>/<id>`): the same shapes, below `..`.
A process on the host (`0::/init.scope`, `/user.slice/...`) is in no container: `None`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Literal

from accelhost.errors import ParseError

# A /proc/PID/cgroup of a v1 host with every controller mounted separately is about 13
# lines of a few hundred characters; anything much larger is not one.
MAX_CGROUP_TEXT = 64 * 1024
_HEX64 = r"[0-9a-f]{64}"
# Scope (or plain directory) names that carry a container id, and whose runtime they name.
_SCOPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"^docker-({_HEX64})\.scope$"), "docker"),
    (re.compile(rf"^cri-containerd-({_HEX64})\.scope$"), "containerd"),
    (re.compile(rf"^nerdctl-({_HEX64})\.scope$"), "containerd"),
    (re.compile(rf"^crio-({_HEX64})(?:\.scope)?$"), "cri-o"),
    (re.compile(rf"^libpod-({_HEX64})(?:\.scope)?$"), "podman"),
    (re.compile(rf"^libpod-payload-({_HEX64})$"), "podman"),
)
_BARE_ID = re.compile(rf"^{_HEX64}$")
# kubepods-burstable-pod1234_abcd.slice / kubepods-pod1234_abcd.slice (Guaranteed), with a
# custom cgroup root's prefix (kind: kubelet-kubepods-besteffort-pod..._....slice)
_POD_SLICE = re.compile(
    r"^(?:[\w.-]+-)?kubepods(?:-(besteffort|burstable))?-pod([0-9a-f_-]{1,64})\.slice$"
)
_NAME = re.compile(r"[A-Za-z0-9][\w.+-]{0,252}")  # an LXC or machine name
_NSPAWN = re.compile(r"^(?:machine-(.+)\.scope|systemd-nspawn@(.+)\.service)$")
_ESCAPED = re.compile(r"\\x([0-9a-f]{2})")  # systemd's unit names: machine-web\x2d1.scope
_RETRY = re.compile(r"-[0-9]+$")  # LXC's `-1`..`-999` when the cgroup existed: ambiguous
_POD_DIR = re.compile(r"^pod([0-9a-f-]{1,64})$")


@dataclass(frozen=True)
class CgroupContainer:
    runtime: str  # docker, containerd, cri-o, podman, kubernetes, lxc, systemd-nspawn; "": unknown
    container_id: str  # 64 hex; an LXC or nspawn container's name
    pod_uid: str | None = None  # Kubernetes pod UID (dashes), when under kubepods
    qos: str | None = None  # guaranteed, burstable, besteffort (Kubernetes only)
    name: str | None = None  # LXC and nspawn: the cgroup names the container


def parse_cgroup_path(path: str) -> CgroupContainer | None:
    """The container a cgroup path names (the innermost one, for nested runtimes)."""
    parts = [p for p in path.split("/") if p]
    found: CgroupContainer | None = None
    pod_uid: str | None = None
    qos: str | None = None
    # Relative to the reader's own cgroup namespace (a pod's, private by default on cgroup
    # v2: a DaemonSet reads `/../../pod<uid>/<id>`), the kubepods root may lie above it.
    in_kubepods = bool(parts) and parts[0] == ".."
    for n, part in enumerate(parts):
        before = parts[n - 1] if n else ""
        m = _POD_SLICE.match(part)
        if part.startswith("kubepods") or m:
            in_kubepods = True
            if m:
                qos = m.group(1) or "guaranteed"
                pod_uid = m.group(2).replace("_", "-")
            elif part in ("kubepods", "kubepods.slice"):
                qos = qos or "guaranteed"
            elif part.startswith("kubepods-") and part.endswith(".slice"):
                qos = part[len("kubepods-") : -len(".slice")]
            continue
        if in_kubepods and part in ("besteffort", "burstable") and pod_uid is None:
            qos = part
            continue
        if part == "conmon":  # Podman's monitor, beside a pod's containers: on the host
            found = None
            continue
        pod = _POD_DIR.match(part) if in_kubepods else None
        if pod:
            pod_uid = pod.group(1)
            continue
        by_name = _by_name(before, part)
        if by_name is not False:
            found = by_name
            continue
        scoped = next(((rt, m[1]) for rx, rt in _SCOPES if (m := rx.match(part))), None)
        if scoped:
            found = CgroupContainer(*scoped)
        elif _BARE_ID.match(part):
            if before == "docker":
                found = CgroupContainer("docker", part)
            elif before.startswith("libpod"):
                found = CgroupContainer("podman", part)
            elif pod_uid is not None:
                found = CgroupContainer("kubernetes", part)
            else:  # containerd's `/<namespace>/<id>`, or any `--cgroup-parent`
                found = CgroupContainer("containerd" if parts[:n] == ["default"] else "", part)
    if found is not None and pod_uid is not None:
        return replace(found, pod_uid=pod_uid, qos=qos)
    return found


def _by_name(before: str, part: str) -> CgroupContainer | None | Literal[False]:
    """An LXC or nspawn container, which its cgroup names by name; None where the name is
    ambiguous (or no name), False where `part` is no such cgroup."""
    if part.startswith("lxc.payload."):
        runtime, name = "lxc", part[len("lxc.payload.") :]
    elif before in ("lxc", "lxc.payload"):
        runtime, name = "lxc", part
    elif part == "payload" and (m := _NSPAWN.match(before)):
        runtime, name = "systemd-nspawn", _ESCAPED.sub(lambda e: chr(int(e[1], 16)), m[1] or m[2])
    else:
        return False
    if not _NAME.fullmatch(name) or (runtime == "lxc" and _RETRY.search(name)):
        return None
    return CgroupContainer(runtime, name, name=name)


def parse_cgroup(text: str, source: str = "/proc/PID/cgroup") -> CgroupContainer | None:
    """The container of a /proc/PID/cgroup text (v1 or v2: the first line that names one);
    None for a process on the host; `ParseError` for text that is no cgroup file."""
    if len(text) > MAX_CGROUP_TEXT:
        raise ParseError(source, f"{len(text)} characters, no cgroup file is that long")
    found: CgroupContainer | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        hierarchy, sep1, rest = line.partition(":")
        _controllers, sep2, path = rest.partition(":")
        if not (sep1 and sep2) or not hierarchy.isdigit() or not path.startswith("/"):
            raise ParseError(source, f"not a cgroup line: {line[:80]!r}")
        if found is None and path != "/":  # the root names no container (most lines)
            found = parse_cgroup_path(path)
    return found
