"""Find a process's device: read its open device nodes (or its environment) through a Host.

The reading is here, the rules are in `accelhost.devices` (pure). A node's PCI address,
when sysfs or the NVIDIA driver tells it, joins the node to a plan device by the plan's
`pci`; otherwise the number in the node's name is the host id, which plan keys are.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from accelhost.devices import (
    HeldNode,
    Identified,
    NvidiaGpu,
    device_of_nodes,
    device_of_rank,
    nodes_of_targets,
    parse_nvidia_information,
)

if TYPE_CHECKING:
    from accelhost.host.base import Host
    from accelhost.plans import Plan

NVIDIA_GPUS = "/proc/driver/nvidia/gpus"
# Where the kernel says which PCI device a render / accel node belongs to.
_SYSFS_CLASS = {"render": "/sys/class/drm/renderD{n}", "accel": "/sys/class/accel/accel{n}"}


def _host(host: Host | None) -> Host:
    if host is not None:
        return host
    from accelhost.host.live import live_host

    return live_host()


def plan_pci(plan: Plan) -> dict[str, int]:
    """PCI address (lower case) -> device id, for the plan devices that carry one."""
    return {d.pci.strip().lower(): d.device for d in plan.devices if d.pci}


def nvidia_gpus(host: Host) -> list[NvidiaGpu]:
    """Every GPU the NVIDIA driver lists, with its minor number and UUID."""
    out = []
    for pci in host.list_dir(NVIDIA_GPUS) or []:
        text = host.read_file(f"{NVIDIA_GPUS}/{pci}/information")
        if text is not None:
            out.append(parse_nvidia_information(pci, text))
    return out


def held_nodes(pid: int, globs: Sequence[str] = (), host: Host | None = None) -> list[HeldNode]:
    """The device nodes `pid` holds open, each with its PCI address where one is known."""
    from accelhost.readers.procs import open_fds

    h = _host(host)
    nodes = nodes_of_targets((open_fds(h, pid) or {}).values(), globs)
    minors: dict[int, str] | None = None
    out = []
    for node in nodes:
        pci: str | None = None
        if node.kind in _SYSFS_CLASS:
            number = os.path.basename(node.path).removeprefix("renderD").removeprefix("accel")
            link = h.read_link(_SYSFS_CLASS[node.kind].format(n=number) + "/device")
            pci = os.path.basename(link).lower() if link else None
        elif node.kind == "nvidia" and node.number is not None:
            if minors is None:
                minors = {g.minor: g.pci for g in nvidia_gpus(h) if g.minor is not None}
            pci = minors.get(node.number)
        out.append(HeldNode(node.path, node.kind, node.number, pci))
    return out


def device_of_pid(
    pid: int, plan: Plan | None = None, globs: Sequence[str] = (), host: Host | None = None
) -> Identified:
    """The one device `pid` holds open; UsageError (exit 2) for none or several."""
    nodes = held_nodes(pid, globs, host)
    return device_of_nodes(pid, nodes, plan_pci(plan) if plan is not None else None)


def namespace_ids(family: str | None, host: Host) -> list[int]:
    """Numbers of the device nodes present in this (container) namespace's /dev.

    Container runtimes mount a host's /dev/davinci3 as /dev/davinci3: these numbers are
    host ids, and the runtime numbers them 0, 1, ... in this order.
    """
    from accelhost.family import ASCEND_FAMILIES

    if family in ASCEND_FAMILIES:
        prefixes: tuple[str, ...] = ("davinci",)
    elif family == "nvidia":
        prefixes = ("nvidia",)
    else:
        prefixes = ("davinci", "nvidia")
    names = host.list_dir("/dev") or []
    for prefix in prefixes:
        ids = sorted(
            int(n[len(prefix) :])
            for n in names
            if n.startswith(prefix) and n[len(prefix) :].isdigit()
        )
        if ids:
            return ids
    return []


def device_of_local_rank(
    plan: Plan,
    local_rank: int,
    env: Mapping[str, str] | None = None,
    host: Host | None = None,
) -> Identified:
    """The host id (a plan key) of the device worker `local_rank` of this process uses."""
    h = _host(host)
    environ = dict(os.environ) if env is None else env
    family = plan.device_type
    gpus = nvidia_gpus(h)
    by_pci = plan_pci(plan)
    uuids = {
        g.uuid: by_pci.get(g.pci, g.minor)
        for g in gpus
        if g.uuid is not None and (g.pci in by_pci or g.minor is not None)
    }
    found = device_of_rank(
        environ,
        local_rank,
        family=family,
        namespace_ids=namespace_ids(family, h),
        uuids={k: v for k, v in uuids.items() if v is not None},
    )
    # A node number whose GPU is a plan device by PCI address: the plan's key wins.
    pci = {g.minor: g.pci for g in gpus}.get(found.device)
    if pci is not None and pci in by_pci and by_pci[pci] != found.device:
        dev = by_pci[pci]
        return Identified(
            dev, f"{found.how}; /dev/nvidia{found.device} is {pci}, plan device {dev}"
        )
    return found


def device_for_command(
    pid: int, plan_path: str | None, globs: Sequence[str] = (), host: Host | None = None
) -> Identified:
    """`bind`/`verify --pid P` without --device: the device P holds, joined to the plan
    file's `pci` when it has them (when planning this host, the node's number)."""
    from accelhost.errors import ApplyError

    h = _host(host)
    if h.list_dir(f"/proc/{pid}") is None:
        raise ApplyError(f"process {pid} does not exist")
    plan = None
    if plan_path:
        from accelhost.plans import load_plan

        plan = load_plan(plan_path)
    return device_of_pid(pid, plan, globs, h)
