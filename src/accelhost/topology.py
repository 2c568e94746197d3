"""Immutable facts about one host: CPUs, NUMA nodes, allowed CPUs, accelerators.

Vendor-neutral on purpose: Ascend NPUs and PCI GPUs are both `Accelerator`s with an index
(the logical id a worker uses), an optional PCI address, NUMA node and CPU affinity.
Built by `accelhost.readers.read_topology(host)`; consumed by planners, which are pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class Accelerator:
    """One accelerator (an Ascend chip, a GPU, any PCI device) as a worker addresses it."""

    index: int
    name: str = ""
    npu_id: int | None = None
    chip_id: int | None = None
    pci: str | None = None
    numa_node: int | None = None
    uuid: str | None = None


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
class Topology:
    """What the planners read. `None` means "not known on this host", `()` means "none".

    `cpu_node` / `node_cpus` come from `lscpu -e=CPU,NODE` (node CPUs in file order);
    `affinity` maps a device index to its reported CPU affinity in written order;
    `processes` are every device process on the host, not only this one's.
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

    @property
    def indices(self) -> tuple[int, ...]:
        """Logical ids of every accelerator on the host, ascending."""
        return tuple(sorted(a.index for a in self.accelerators))

    def accelerator(self, index: int) -> Accelerator | None:
        for acc in self.accelerators:
            if acc.index == index:
                return acc
        return None
