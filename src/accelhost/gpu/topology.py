"""`Topology` views of GPU facts, and of a host with no accelerator at all.

`accelhost topo` must show CPUs and nodes even where there is nothing to place, so the CPU
half is read on its own too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from accelhost.gpu.facts import CpuFacts, GpuFacts, read_cpu_facts
from accelhost.host.base import Host
from accelhost.topology import Accelerator, Topology


def gpu_topology(facts: GpuFacts) -> Topology:
    """The GPUs (all of them, visible or not) with their PCI address, node and affinity."""
    accelerators = tuple(
        Accelerator(index=g.index, name="", pci=g.pci, numa_node=g.numa_node, uuid=g.uuid)
        for g in facts.gpus
    )
    affinity = {g.index: g.local_cpus for g in facts.gpus if g.local_cpus is not None}
    return _topology(
        facts.machine,
        facts.family,
        facts.cpu,
        accelerators=accelerators,
        affinity=affinity,
        visible_env=facts.visible_env,
        notes=facts.notes,
    )


def cpu_topology(host: Host, notes: Sequence[str] = ()) -> Topology:
    """CPUs, nodes, allowed CPUs and cpuset from sysfs, for a host without accelerators.

    `notes` come first in the result, so the caller can say plainly why there is no device.
    """
    found: list[str] = []
    cpu = read_cpu_facts(host, found)
    return _topology(host.machine, None, cpu, notes=(*notes, *found))


def _topology(
    machine: str,
    family: str | None,
    cpu: CpuFacts,
    *,
    accelerators: tuple[Accelerator, ...] = (),
    affinity: dict[int, tuple[int, ...]] | None = None,
    visible_env: str | None = None,
    notes: Sequence[str] = (),
) -> Topology:
    node_cpus = dict(cpu.node_cpus) if cpu.node_cpus else {0: tuple(cpu.allowed)}
    cpu_node = {c: node for node, cpus in node_cpus.items() for c in cpus}
    return Topology(
        machine=machine,
        family=family,
        allowed_cpus=tuple(cpu.allowed),
        cpu_node=cpu_node,
        node_cpus=node_cpus,
        cpuset=cpu.cpuset,
        threads_per_core=_threads_per_core(cpu),
        accelerators=accelerators,
        affinity=affinity or {},
        visible_env=visible_env,
        notes=tuple(notes),
    )


def _threads_per_core(cpu: CpuFacts) -> int | None:
    """The most common sibling count; hybrid CPUs (P- and E-cores) mix 2 and 1."""
    if not cpu.siblings:
        return None
    counts = Counter(len(group) for group in cpu.siblings.values())
    return max(counts, key=lambda n: (counts[n], n))
