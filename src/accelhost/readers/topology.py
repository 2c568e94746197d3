"""`read_topology`: the family decided once, and one `Topology` for every family.

The host is wrapped in `accelhost.host.read_once`, so each command and file is read at
most once per call, however many readers below ask.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from accelhost.family import normalize_family
from accelhost.host.base import Host, recorded_pci
from accelhost.host.once import read_once
from accelhost.readers.ascend import NPU_INFO, NPU_MAP, NPU_TOPO, read_ascend_topology
from accelhost.readers.cpus import (
    LSCPU,
    LSCPU_NODES,
    read_allowed_cpus,
    read_cgroup_cpuset,
    read_lscpu_nodes,
    read_threads_per_core,
)
from accelhost.topology import Topology

NO_SMI = "nvidia-smi is not installed (name PCI devices with --pci)"
NO_PCI = "no PCI device given (name them with --pci)"


def read_topology(
    host: Host, device_type: str | None = None, pci: Sequence[str] | None = None
) -> Topology:
    """Everything the planners need about `host`, for whatever family it is.

    The family is `pci` when PCI addresses are given, else `device_type`, else the
    host's recorded one, else told from what is installed: npu-smi (then the chip names),
    nvidia-smi, or nothing (a plain host: CPUs and nodes only, family None).
    """
    host = read_once(host)
    family = normalize_family(device_type) if device_type else None
    if family is None and host.device_type:
        family = normalize_family(host.device_type)
    if pci is None and family == "pci":
        pci = recorded_pci(host)  # `snapshot --pci ADDR` replays with those addresses
    topo = _read(host, family, pci)
    return topo if host.is_live else replace(topo, recorded=True)


def _read(host: Host, family: str | None, pci: Sequence[str] | None) -> Topology:
    if family not in ("pci", "nvidia") and pci is None:
        map_res, info_res, *_ = host.run_many([NPU_MAP, NPU_INFO, NPU_TOPO, LSCPU_NODES, LSCPU])
        if family is not None or map_res is not None or info_res is not None:
            return read_ascend_topology(host, family)
    # A GPU host's topology, else a plain one. The GPU readers and their parsers load only
    # here: an Ascend `plan` does not pay for them at start-up.
    from accelhost.readers.gpu import read_gpu_topology

    if pci is not None:
        found = read_gpu_topology(host, pci=pci)
        assert found is not None  # with addresses given there is always a topology
        return found
    if family == "pci":
        return plain_topology(host, family, notes=(NO_PCI,))
    found = read_gpu_topology(host)
    if family == "nvidia":
        return found or plain_topology(host, family, notes=(NO_SMI,))
    return found or plain_topology(host)


def plain_topology(host: Host, family: str | None = None, notes: Sequence[str] = ()) -> Topology:
    """CPUs and NUMA nodes of a host with no accelerator we can see.

    Nodes come from lscpu as on Ascend hosts, from sysfs where lscpu is missing.
    """
    cpu_node, node_cpus = read_lscpu_nodes(host)
    if not cpu_node:
        from accelhost.readers.gpu import read_sysfs_topology

        found: list[str] = []
        base = read_sysfs_topology(host, found)
        return replace(
            base,
            family=family,
            threads_per_core=read_threads_per_core(host) or base.threads_per_core,
            notes=(*notes, *found),
        )
    cpuset = read_cgroup_cpuset(host)
    return Topology(
        machine=host.machine,
        family=family,
        allowed_cpus=read_allowed_cpus(host) or (),
        cpu_node=cpu_node,
        node_cpus=node_cpus,
        cpuset=cpuset[0] if cpuset else None,
        threads_per_core=read_threads_per_core(host),
        notes=tuple(notes),
    )
