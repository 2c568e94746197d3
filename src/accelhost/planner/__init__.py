"""Planners: pure functions from a `Topology` to a `Plan`, one per family and strategy:
`ascend` (vllm-ascend's pools and roles), `gpu` (torchrun's `--numa-binding`), `visible`
(the visible-devices variables and GPU UUIDs), `roles` (IRQ CPUs and thread roles added
on top of any plan). `plan_topology` is the one place that picks a topology's planner.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelhost.errors import PlanError
from accelhost.family import ASCEND_FAMILIES, GPU_FAMILIES
from accelhost.planner.ascend import no_family, plan_ascend
from accelhost.plans import Plan
from accelhost.topology import Topology


def __getattr__(name: str) -> object:
    """The GPU planner's names, loaded on first use: an Ascend plan does not pay for it."""
    if name in ("DEFAULT_STRATEGY", "NUMA_SOURCES", "STRATEGIES", "plan_gpus"):
        from accelhost.planner import gpu

        return getattr(gpu, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def plan_topology(
    topo: Topology,
    *,
    strategy: str | None = None,
    devices: Sequence[int] | None = None,
    numa_from: str = "numa_node",
) -> Plan:
    """The plan of `topo` by its family's rules; PlanError when there is nothing to plan."""
    if topo.family in ASCEND_FAMILIES:
        return plan_ascend(topo, strategy=strategy, devices=devices)
    if topo.family in GPU_FAMILIES:
        from accelhost.planner.gpu import DEFAULT_STRATEGY, plan_gpus

        return plan_gpus(
            topo, strategy=strategy or DEFAULT_STRATEGY, numa_from=numa_from, devices=devices
        )
    if topo.accelerators:
        raise PlanError(no_family(topo))
    if topo.unread:
        raise PlanError(f"cannot tell which accelerators {topo.here} has: {'; '.join(topo.unread)}")
    if topo.recorded:
        raise PlanError(
            "no accelerator found on the recorded host (npu-smi and nvidia-smi were not "
            "installed there, and it was recorded without --pci: record it with "
            "`accelhost snapshot --pci ADDR` to plan PCI devices)"
        )
    raise PlanError(
        "no accelerator found on this host (npu-smi and nvidia-smi are not installed "
        "and no --pci device was given)"
    )
