"""The public library API: read a host, make its plan."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from accelhost.errors import PlanError
from accelhost.family import ASCEND_FAMILIES, normalize_family
from accelhost.host.base import Host
from accelhost.host.live import LiveHost
from accelhost.plans import Plan

if TYPE_CHECKING:
    from accelhost.planner.roles import RoleSpec


def live_host() -> LiveHost:
    """This machine, read-only."""
    return LiveHost()


def plan(
    host: Host,
    *,
    device_type: str | None = None,
    strategy: str | None = None,
    devices: Sequence[int] | None = None,
    pci: Sequence[str] | None = None,
    numa_from: str = "numa_node",
    reserve_irq: int = 0,
    thread_roles: Sequence[RoleSpec | tuple[str, str, int]] = (),
) -> Plan:
    """The CPU plan of every visible accelerator of `host` (PlanError when none can be made).

    Ascend plans equal vllm-ascend's by default. `devices` names the accelerators to plan
    for when no engine runs yet; `reserve_irq` and `thread_roles` add roles on top.
    """
    family = normalize_family(device_type) if device_type else None
    if (
        pci
        or family in ("nvidia", "pci")
        or (family is None and (host.device_type or "").lower() in ("nvidia", "pci"))
    ):
        result = _plan_gpu(host, strategy=strategy, devices=devices, pci=pci, numa_from=numa_from)
    else:
        from accelhost.readers import read_topology

        topo = read_topology(host, device_type=family)
        if topo.family in ASCEND_FAMILIES:
            from accelhost.planner.ascend import plan_ascend

            result = plan_ascend(topo, strategy=strategy, devices=devices)
        elif topo.family in ("nvidia", "pci"):
            result = _plan_gpu(
                host, strategy=strategy, devices=devices, pci=pci, numa_from=numa_from
            )
        elif topo.accelerators:
            raise PlanError(
                "cannot tell the accelerator family of this host; pass --device-type "
                "(A2, A3, 310P, 950, nvidia, pci)"
            )
        else:
            raise PlanError(
                "no accelerator found on this host (npu-smi and nvidia-smi are not installed "
                "and no --pci device was given)"
            )
    if reserve_irq or thread_roles:
        from accelhost.planner.roles import add_roles

        result = add_roles(result, reserve_irq=reserve_irq, thread_roles=thread_roles)
    return result


def _plan_gpu(
    host: Host,
    *,
    strategy: str | None,
    devices: Sequence[int] | None,
    pci: Sequence[str] | None,
    numa_from: str,
) -> Plan:
    from accelhost import gpu

    facts = gpu.read_gpu_facts(host, pci=pci)
    if facts is None:
        raise PlanError("no GPU found on this host (nvidia-smi is not installed; use --pci)")
    return gpu.plan_gpus(
        facts, strategy=strategy or "exclusive", numa_from=numa_from, devices=devices
    )
