"""GPU strategies: the CPU sets torchrun's `--numa-binding` gives, for all GPUs at once.

Pure functions of a GPU (or `--pci`) `Topology`. torchrun computes one GPU's set inside
its own worker and fails that worker alone; here every visible GPU is planned together
and any GPU that cannot be planned refuses the whole plan, so a launcher never starts
half-bound.

Rules (docs/gpu.md), for GPU g on node n with A = allowed CPUs:
- node: A ∩ n.
- socket: A ∩ every node on n's socket (a node's socket: the package of its lowest
  allowed CPU; nodes without allowed CPUs are skipped).
- exclusive: the physical cores of A ∩ n, keyed by their lowest sibling and sorted, cut
  among the node's GPUs by CUDA ordinal: `cores // gpus` each, one more for the first
  `cores % gpus`.
- core-complex: A ∩ n grouped by highest-level data/unified cache, groups ordered by size
  (largest first) then lowest member; the GPU of rank r takes group `r % groups`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from accelhost.cpulist import format_cpulist
from accelhost.errors import PlanError
from accelhost.planner.visible import resolve_visible
from accelhost.plans import DevicePlan, Plan
from accelhost.topology import Accelerator, Topology

STRATEGIES: tuple[str, ...] = ("node", "socket", "exclusive", "core-complex")
DEFAULT_STRATEGY = "exclusive"
NUMA_SOURCES: tuple[str, ...] = ("numa_node", "local_cpulist")


@dataclass(frozen=True)
class _Placed:
    """A visible GPU with its resolved node."""

    gpu: Accelerator
    node: int


def plan_gpus(
    topo: Topology,
    *,
    strategy: str = DEFAULT_STRATEGY,
    numa_from: str = "numa_node",
    devices: Sequence[int] | None = None,
) -> Plan:
    """One pool per visible GPU (main = pool). `devices` limits which GPUs appear in the
    plan, not how CPUs are shared: planning one GPU gives its part of the full plan."""
    if strategy not in STRATEGIES:
        raise PlanError(f"unknown GPU strategy {strategy!r} (choose: {', '.join(STRATEGIES)})")
    if numa_from not in NUMA_SOURCES:
        raise PlanError(f"unknown NUMA source {numa_from!r} (choose: {', '.join(NUMA_SOURCES)})")
    if not topo.accelerators:
        why = "; ".join((*topo.unread, *topo.notes)) or "the host lists no device"
        raise PlanError(f"no GPU to plan: {why}")
    messages: list[str] = list(topo.notes)
    if topo.family == "nvidia":
        visible, visible_messages = resolve_visible(topo.visible_env, topo.accelerators, topo.here)
        messages.extend(visible_messages)
    else:
        visible = tuple(g.index for g in topo.accelerators)
    if not visible:
        raise PlanError(f"no visible GPU (CUDA_VISIBLE_DEVICES={topo.visible_env!r})")
    wanted = tuple(visible) if devices is None else tuple(dict.fromkeys(devices))
    for index in wanted:
        if index not in visible:
            shown = ", ".join(map(str, visible))
            raise PlanError(f"GPU {index} is not visible (visible GPUs: {shown})")

    allowed = set(topo.allowed_cpus)
    if not allowed:
        raise PlanError("no allowed CPU (Cpus_allowed_list is empty)")
    # a host without NUMA information is one node 0 of its allowed CPUs
    node_cpus = dict(topo.node_cpus) if topo.node_cpus else {0: tuple(topo.allowed_cpus)}
    placed: list[_Placed] = []  # in CUDA ordinal order
    for index in visible:
        gpu = topo.accelerator(index)
        assert gpu is not None  # resolve_visible returns known indices only
        node = _gpu_node(gpu, topo.affinity.get(index), numa_from, node_cpus, messages)
        placed.append(_Placed(gpu, node))
    cut = _Cut(topo, node_cpus, allowed, placed)
    for item in placed:
        cut.check(item, numa_from)
    pools = {item.gpu.index: _POOLS[strategy](item, cut) for item in placed}
    cpu_node = {cpu: node for node, cpus in node_cpus.items() for cpu in cpus}
    pci = {item.gpu.index: item.gpu.pci for item in placed}
    plans = (  # a pool's NUMA node is the node of its first CPU
        DevicePlan(i, pools[i], main=pools[i], numa_node=cpu_node.get(pools[i][0]), pci=pci[i])
        for i in sorted(wanted)
    )
    return Plan(
        device_type=topo.family or "pci",
        mode=strategy,
        visible=visible,
        devices=tuple(plans),
        messages=tuple(dict.fromkeys(messages)),
    )


def _gpu_node(
    gpu: Accelerator,
    local_cpus: tuple[int, ...] | None,
    numa_from: str,
    node_cpus: Mapping[int, Sequence[int]],
    messages: list[str],
) -> int:
    if numa_from == "local_cpulist":
        if not local_cpus:
            raise PlanError(
                f"GPU {gpu.index} ({gpu.pci}) has no local_cpulist to take its node from"
            )
        local = set(local_cpus)
        counts = {n: len(local & set(cpus)) for n, cpus in node_cpus.items()}
        best = max(counts.values(), default=0)
        if best == 0:
            raise PlanError(
                f"GPU {gpu.index} ({gpu.pci}): its local CPUs "
                f"{format_cpulist(local)} lie on no NUMA node"
            )
        hits = sorted(n for n, c in counts.items() if c > 0)
        node = min(n for n, c in counts.items() if c == best)
        if len(hits) > 1:
            messages.append(
                f"GPU {gpu.index} ({gpu.pci}): local_cpulist spans nodes "
                f"{', '.join(map(str, hits))}; using node {node}, which holds most of them"
            )
        return node
    if gpu.numa_node is not None:
        return gpu.numa_node
    if not gpu.in_sysfs and gpu.numa_source == "unknown":
        hint = "; its local CPUs are known: numa_from='local_cpulist' places it by them"
        raise PlanError(
            f"device {gpu.index} ({gpu.pci}) has no entry in /sys/bus/pci/devices "
            f"(mistyped address, or a container without the host's PCI tree)"
            f"{hint if local_cpus else ''}"
        )
    if sum(1 for cpus in node_cpus.values() if cpus) > 1:
        what = "reports numa_node -1" if gpu.numa_source == "sysfs" else "has no known node"
        messages.append(
            f"GPU {gpu.index} ({gpu.pci}) {what}; using node 0 as torchrun does "
            "(numa_from='local_cpulist' takes the node of its local CPUs instead)"
        )
    return 0


@dataclass(frozen=True)
class _Cut:
    """What every strategy cuts from: the host, its nodes, the allowed CPUs, every GPU."""

    topo: Topology
    node_cpus: Mapping[int, Sequence[int]]
    allowed: set[int]
    placed: Sequence[_Placed]  # in CUDA ordinal order

    def check(self, item: _Placed, numa_from: str) -> None:
        """PlanError unless the GPU's node has CPUs and some of them are allowed."""
        gpu, node = item.gpu, item.node
        cpus = self.node_cpus.get(node)
        who = f"GPU {gpu.index} ({gpu.pci})"
        if cpus is None:
            raise PlanError(f"{who} is on NUMA node {node}, which {self.topo.here} does not have")
        if not cpus:
            hint = (
                "; numa_from='local_cpulist' (--numa-from local_cpulist) places it by its "
                "local CPUs instead"
            )
            raise PlanError(
                f"{who} is on NUMA node {node}, a memory-only node with no CPUs "
                f"(as GPU memory on Grace hosts){hint if numa_from == 'numa_node' else ''}"
            )
        if not self.allowed.intersection(cpus):
            raise PlanError(
                f"{who} is on NUMA node {node}, but none of its CPUs "
                f"({format_cpulist(cpus)}) are allowed (allowed: {format_cpulist(self.allowed)})"
            )

    def node_allowed(self, node: int) -> list[int]:
        return sorted(self.allowed.intersection(self.node_cpus.get(node, ())))

    def socket_of(self, node: int) -> int:
        lowest = min(self.node_allowed(node))
        package = self.topo.cpu.packages.get(lowest)
        if package is None:
            raise PlanError(
                f"cannot tell the socket of NUMA node {node}: "
                f"no physical_package_id for CPU {lowest}"
            )
        return package

    def node_gpus(self, item: _Placed) -> list[_Placed]:
        """The visible GPUs on the item's node, by CUDA ordinal (torchrun's local rank)."""
        return [p for p in self.placed if p.node == item.node]


def _pool_node(item: _Placed, cut: _Cut) -> tuple[int, ...]:
    return tuple(cut.node_allowed(item.node))


def _pool_socket(item: _Placed, cut: _Cut) -> tuple[int, ...]:
    """The GPU's own node first, so pool[0] (IRQ CPUs, memory node) stays next to it."""
    socket = cut.socket_of(item.node)
    own = cut.node_allowed(item.node)
    others: set[int] = set()
    for node in sorted(cut.node_cpus):
        cpus = cut.node_allowed(node)
        if node != item.node and cpus and cut.socket_of(node) == socket:
            others.update(cpus)
    return tuple(own) + tuple(sorted(others.difference(own)))


def _pool_exclusive(item: _Placed, cut: _Cut) -> tuple[int, ...]:
    cores: dict[int, list[int]] = {}
    for cpu in cut.node_allowed(item.node):
        siblings = cut.topo.cpu.siblings.get(cpu) or (cpu,)
        cores.setdefault(min(siblings), []).append(cpu)
    keys = sorted(cores)
    peers = cut.node_gpus(item)
    if len(keys) < len(peers):
        names = ", ".join(str(p.gpu.index) for p in peers)
        raise PlanError(
            f"NUMA node {item.node} has {len(keys)} allowed physical core(s) for "
            f"{len(peers)} GPUs ({names}): exclusive needs at least one core per GPU"
        )
    rank = peers.index(item)
    base, extra = divmod(len(keys), len(peers))
    start = rank * base + min(rank, extra)
    end = start + base + (1 if rank < extra else 0)
    return tuple(sorted(cpu for key in keys[start:end] for cpu in cores[key]))


def _pool_core_complex(item: _Placed, cut: _Cut) -> tuple[int, ...]:
    groups: dict[int, list[int]] = {}
    for cpu in cut.node_allowed(item.node):
        shared = cut.topo.cpu.caches.get(cpu)
        if not shared:
            raise PlanError(
                f"core-complex needs cache information, and CPU {cpu} has none "
                f"(/sys/devices/system/cpu/cpu{cpu}/cache)"
            )
        groups.setdefault(min(shared), []).append(cpu)
    ordered = sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    rank = cut.node_gpus(item).index(item)
    return tuple(sorted(ordered[rank % len(ordered)][1]))


_POOLS = {
    "node": _pool_node,
    "socket": _pool_socket,
    "exclusive": _pool_exclusive,
    "core-complex": _pool_core_complex,
}
