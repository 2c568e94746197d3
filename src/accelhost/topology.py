"""Immutable facts about one host: CPUs, NUMA nodes, allowed CPUs, accelerators.

One `Topology` for every family, built by `accelhost.readers.topology.read_topology(host)`
and consumed by the planners, which are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


class Accelerator(NamedTuple):
    """One accelerator (an Ascend chip, a GPU, any PCI device) as a worker addresses it;
    a NamedTuple because every plan builds one per device."""

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
    """A row of a device's process table (`npu-smi info`); a NamedTuple: a host has hundreds."""

    npu_id: int
    chip_id: int | None
    pid: int
    name: str = ""
    memory_mb: int | None = None


@dataclass(frozen=True)
class CpuDetail:
    """CPU facts beyond nodes and allowed CPUs, for the GPU strategies. `siblings` / `caches`
    hold all members, allowed or not (torchrun keys cores and complexes by their lowest);
    `packages` only the lowest allowed CPU of each node."""

    siblings: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    packages: Mapping[int, int] = field(default_factory=dict)
    caches: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    allowed_source: str = "/proc/self/status"


@dataclass(frozen=True)
class Topology:
    """What the planners read. `None` means "not known on this host", `()` means "none".
    `processes` are every device process on the host, not only this one's."""

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
    cpu: CpuDetail = CpuDetail()
    # Why a device tool told nothing (it failed): its devices or processes are then
    # unknown, never "none".
    unread: tuple[str, ...] = ()
    # Where the facts came from (a recording), not a fact: a replay equals the live read.
    recorded: bool = field(default=False, compare=False)

    @property
    def here(self) -> str:
        """The host in a message's words: "this host" live, "the recorded host" replayed."""
        return "the recorded host" if self.recorded else "this host"

    def accelerator(self, index: int) -> Accelerator | None:
        return next((acc for acc in self.accelerators if acc.index == index), None)
