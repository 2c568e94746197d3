"""The public library API: read a host, make its plan, the same way for every family:
host -> facts (`accelhost.readers`) -> `Topology` -> planner (`accelhost.planner`) -> `Plan`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from accelhost.errors import PlanError
from accelhost.host.base import Host
from accelhost.plans import Plan, PlannedHost, read_hostname

if TYPE_CHECKING:
    from accelhost.planner.roles import RoleSpec


def plan(
    host: Host,
    *,
    device_type: str | None = None,
    strategy: str | None = None,
    devices: Sequence[int] | None = None,
    pci: Sequence[str] | None = None,
    numa_from: str = "numa_node",
    reserve_irq: int = 0,
    thread_roles: Sequence[RoleSpec] = (),
) -> Plan:
    """The CPU plan of every visible accelerator of `host` (PlanError when none can be made).
    Ascend plans equal vllm-ascend's by default, GPU plans torchrun's."""
    from accelhost.planner import plan_topology
    from accelhost.readers.topology import read_topology

    topo = read_topology(host, device_type=device_type, pci=pci or None)
    result = plan_topology(topo, strategy=strategy, devices=devices, numa_from=numa_from)
    planned = PlannedHost(read_hostname(host), topo.allowed_cpus, tuple(sorted(topo.node_cpus)))
    result = replace(result, host=planned)
    if reserve_irq or thread_roles:
        from accelhost.planner.roles import add_roles

        result = add_roles(result, reserve_irq=reserve_irq, thread_roles=thread_roles)
    return result


def plan_for_device(host: Host, device: int, **kwargs: Any) -> Plan:
    """The host's plan when it holds `device`, else a plan for that device alone (no engine
    runs on it yet), as `plan --device N` does; `host` is read once for both attempts."""
    from accelhost.host.once import read_once

    host = read_once(host)
    try:
        result = plan(host, **kwargs)
        if result.worker_skip(device) is None:  # a skipped worker: the host threads' plan
            result.device(device)
        return result
    except PlanError:
        return plan(host, devices=[device], **kwargs)
