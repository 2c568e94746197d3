"""Immutable facts about one host: CPUs, NUMA nodes, allowed CPUs, accelerators.

One `Topology` for every family: Ascend NPUs, NVIDIA GPUs and plain PCI devices are all
`Accelerator`s with an index (the logical id a worker uses), an optional PCI address, NUMA
node and CPU affinity. The CPU details that only some strategies need (SMT siblings,
sockets, caches: torchrun's GPU rules) are the typed part `Topology.cpu`.
Built by `accelhost.readers.topology.read_topology(host)`; consumed by planners, which are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


class Accelerator(NamedTuple):
    """One accelerator (an Ascend chip, a GPU, any PCI device) as a worker addresses it.

    A NamedTuple, like the parser records: every plan builds one per device, and a tuple
    costs a fraction of a frozen dataclass to build.
    """

    index: int  # type: ignore[assignment]  # shadows tuple.index(), never called here
    name: str = ""
    npu_id: int | None = None
    chip_id: int | None = None
    pci: str | None = None
    numa_node: int | None = None
    uuid: str | None = None
    # Where `numa_node` / the affinity came from (`sysfs`, `nvidia-smi topo -m`, `nvml`,
    # `unknown`); `in_sysfs` is False when /sys/bus/pci/devices/<pci> had neither
    # `numa_node` nor `local_cpulist` (a mistyped `--pci`, or a container hiding the tree).
    numa_source: str = "sysfs"
    cpus_source: str = "sysfs"
    in_sysfs: bool = True
    msi_irqs: tuple[int, ...] = ()


class DeviceProcess(NamedTuple):
    """A row of a device's process table (`npu-smi info`, `nvidia-smi` compute apps).

    A NamedTuple, like the other per-row parser records: a busy host has hundreds of
    rows, and a tuple costs a fraction of a frozen dataclass to build.
    """

    npu_id: int
    chip_id: int | None
    pid: int
    name: str = ""
    memory_mb: int | None = None


@dataclass(frozen=True)
class CpuDetail:
    """CPU facts beyond nodes and allowed CPUs, read from sysfs where a strategy needs them.

    `siblings` / `caches` map an allowed CPU to the full sibling list / the CPUs sharing
    its highest-level data or unified cache (allowed or not: torchrun keys cores and
    complexes by their lowest member). `packages` maps CPUs to their socket, read for the
    lowest allowed CPU of each node only. `possible_nodes` are every node id that exists.
    """

    possible_nodes: tuple[int, ...] = ()
    siblings: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    packages: Mapping[int, int] = field(default_factory=dict)
    caches: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    cpuset_path: str | None = None
    allowed_source: str = "/proc/self/status"


NO_CPU_DETAIL = CpuDetail()


@dataclass(frozen=True)
class Topology:
    """What the planners read. `None` means "not known on this host", `()` means "none".

    `cpu_node` / `node_cpus` come from `lscpu -e=CPU,NODE` on Ascend and plain hosts
    (node CPUs in file order) and from sysfs on GPU hosts (CPU-less memory nodes as `()`);
    `affinity` maps a device index to its reported CPU affinity in written order (GPUs:
    their `local_cpulist`); `processes` are every device process on the host, not only
    this one's; `visible_env` is the family's visibility variable as the host has it.
    """

    machine: str
    family: str | None
    allowed_cpus: tuple[int, ...]
    cpu_node: Mapping[int, int] = field(default_factory=dict)
    node_cpus: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    cpuset: tuple[int, ...] | None = None
    threads_per_core: int | None = None
    accelerators: tuple[Accelerator, ...] = ()
    affinity: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    processes: tuple[DeviceProcess, ...] = ()
    process_table_npu_id: bool = False
    visible_env: str | None = None
    host_thread_tids: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    cpu: CpuDetail = NO_CPU_DETAIL

    @property
    def indices(self) -> tuple[int, ...]:
        """Logical ids of every accelerator on the host, ascending."""
        return tuple(sorted(a.index for a in self.accelerators))

    def accelerator(self, index: int) -> Accelerator | None:
        """The accelerator whose logical id is `index`, if the host has it."""
        for acc in self.accelerators:
            if acc.index == index:
                return acc
        return None
