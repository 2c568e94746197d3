"""A GPU host's topology: nvidia-smi (or `--pci` addresses) for the devices, sysfs for
their NUMA node, local CPUs and IRQs, and sysfs for the CPUs, as torchrun reads them.

NVML (nvidia-ml-py) is the last resort for GPUs that sysfs and `nvidia-smi topo -m` leave
without a NUMA node or CPU affinity: imported only when needed and only on a live host; a
missing or failing NVML simply gives nothing, because it is never more than a third
opinion."""

from __future__ import annotations

import contextlib
import importlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from accelhost.cpulist import MAX_CPUS, parse_cpulist
from accelhost.errors import ParseError
from accelhost.host.base import CommandResult, Host
from accelhost.parsers.nvidia_smi import (
    QUERY_GPU_ARGV,
    TOPO_ARGV,
    GpuRow,
    TopoAffinity,
    parse_query_gpu,
    parse_topo_matrix,
)
from accelhost.parsers.sysfs import PCI_DEVICES, normalize_pci_address, parse_numa_node
from accelhost.readers.cpus import (
    allowed_or_fallback,
    read_allowed_cpus,
    read_cgroup_cpuset,
    read_cpu_detail,
    read_sysfs_nodes,
)
from accelhost.topology import Accelerator, CpuDetail, Topology

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
NVIDIA_COMMANDS = [list(QUERY_GPU_ARGV), list(TOPO_ARGV)]


def read_gpu_topology(host: Host, pci: Sequence[str] | None = None) -> Topology | None:
    """The GPUs (or `pci` devices, from sysfs only, indexed in the given order) and CPUs of
    `host`; None when it has no nvidia-smi and no `pci` was given."""
    notes: list[str] = []
    unread: list[str] = []
    topo: dict[int, TopoAffinity] = {}
    rows: list[GpuRow]
    if pci is not None:
        family = "pci"
        rows = [GpuRow(i, addr, None) for i, addr in enumerate(pci_addresses(pci))]
        visible_env = None
    else:
        family = "nvidia"
        query, topo_result = host.run_many(NVIDIA_COMMANDS)
        if query is None:
            return None
        rows = _nvidia_rows(query, notes, unread)
        topo = _topo(topo_result, notes)
        visible_env = host.getenv(CUDA_VISIBLE_DEVICES)
    base = read_sysfs_topology(host, notes)
    gpus = [_read_gpu(host, row, topo.get(row.index)) for row in rows]
    if family == "nvidia":
        gpus = _nvml_fill(host, gpus, notes)
    return replace(
        base,
        family=family,
        accelerators=tuple(acc for acc, _ in gpus),
        affinity={acc.index: cpus for acc, cpus in gpus if cpus is not None},
        visible_env=visible_env,
        notes=tuple(notes),
        unread=tuple(unread),
    )


def read_sysfs_topology(host: Host, notes: list[str]) -> Topology:
    """CPUs, nodes, allowed CPUs, cpuset and CPU details from sysfs, with no device.

    A host without NUMA information is one node 0 of its allowed CPUs, as torchrun has it.
    """
    node_cpus = read_sysfs_nodes(host)
    if not node_cpus:
        notes.append("no NUMA node information in sysfs; all allowed CPUs count as node 0")
    cpuset = read_cgroup_cpuset(host)
    allowed, source = allowed_or_fallback(read_allowed_cpus(host), cpuset, node_cpus, notes)
    detail = read_cpu_detail(host, allowed, node_cpus, source)
    nodes = dict(node_cpus) if node_cpus else {0: allowed}
    return Topology(
        machine=host.machine,
        family=None,
        allowed_cpus=allowed,
        cpu_node={c: node for node, cpus in nodes.items() for c in cpus},
        node_cpus=nodes,
        cpuset=cpuset[0] if cpuset else None,
        threads_per_core=_threads_per_core(detail),
        cpu=detail,
    )


def pci_addresses(pci: Sequence[str]) -> list[str]:
    """`--pci` values (each may hold a comma-separated list) in sysfs form, in given order."""
    addresses: list[str] = []
    for raw in pci:
        for item in raw.split(","):
            if not item.strip():
                continue
            addr = normalize_pci_address(item, "--pci")
            if addr in addresses:
                raise ParseError("--pci", f"{addr} given twice")
            addresses.append(addr)
    if not addresses:
        raise ParseError("--pci", "no PCI address given")
    return addresses


def _nvidia_rows(query: CommandResult, notes: list[str], unread: list[str]) -> list[GpuRow]:
    if not query.ok:
        first = next((ln.strip() for ln in query.stdout.splitlines() if ln.strip()), "")
        why = f": {first}" if first else ""
        unread.append(f"nvidia-smi failed (exit status {query.rc}){why}")
        return []
    rows = parse_query_gpu(query.stdout, " ".join(QUERY_GPU_ARGV))
    if not rows:
        notes.append("nvidia-smi lists no GPU")
    return rows


def _topo(result: CommandResult | None, notes: list[str]) -> dict[int, TopoAffinity]:
    if result is None or not result.ok:
        return {}
    try:
        return parse_topo_matrix(result.stdout, " ".join(TOPO_ARGV))
    except ParseError as exc:
        # a fallback source only: an unreadable matrix must not hide the sysfs facts
        notes.append(f"ignored: {exc}")
        return {}


def _read_gpu(
    host: Host, gpu: GpuRow, row: TopoAffinity | None
) -> tuple[Accelerator, tuple[int, ...] | None]:
    """(the device, its local CPUs or None): sysfs first, `nvidia-smi topo -m` (`row`) after."""
    base = f"{PCI_DEVICES}/{gpu.pci}"
    node_text = host.read_file(f"{base}/numa_node")
    cpus_text = host.read_file(f"{base}/local_cpulist")
    irq_names = host.list_dir(f"{base}/msi_irqs") or []
    numa_node, numa_source = None, "unknown"
    if node_text is not None:
        numa_node, numa_source = parse_numa_node(node_text, f"{base}/numa_node"), "sysfs"
    elif row is not None and row.numa_nodes and len(row.numa_nodes) == 1:
        numa_node, numa_source = row.numa_nodes[0], "nvidia-smi topo -m"
    local_cpus, cpus_source = None, "unknown"
    if cpus_text is not None and cpus_text.strip():
        local_cpus, cpus_source = tuple(parse_cpulist(cpus_text, f"{base}/local_cpulist")), "sysfs"
    elif row is not None and row.cpus:
        local_cpus, cpus_source = row.cpus, "nvidia-smi topo -m"
    acc = Accelerator(
        index=gpu.index,
        pci=gpu.pci,
        uuid=gpu.uuid,
        numa_node=numa_node,
        numa_source=numa_source,
        cpus_source=cpus_source,
        in_sysfs=node_text is not None or cpus_text is not None,
        msi_irqs=tuple(sorted(int(n) for n in irq_names if n.isdigit() and len(n) < 10)),
    )
    return acc, local_cpus


def _nvml_fill(
    host: Host, gpus: list[tuple[Accelerator, tuple[int, ...] | None]], notes: list[str]
) -> list[tuple[Accelerator, tuple[int, ...] | None]]:
    """Last resort for GPUs whose node and CPUs neither sysfs nor `topo -m` gave: live hosts
    only (NVML cannot be replayed), and only when nvidia-ml-py is installed."""
    missing = [acc.index for acc, cpus in gpus if acc.numa_node is None and cpus is None]
    if not missing or not host.is_live:
        return gpus
    found = nvml_affinity(missing)
    out = []
    for acc, cpus in gpus:
        if (hit := found.get(acc.index)) is not None:  # only the missing ones were asked
            node, cpus = hit
            notes.append(f"GPU {acc.index}: NUMA node and CPUs from NVML (not kept in snapshots)")
            acc = acc._replace(
                numa_node=node,
                numa_source="nvml" if node is not None else acc.numa_source,
                cpus_source="nvml" if cpus is not None else acc.cpus_source,
            )
        out.append((acc, cpus))
    return out


def _threads_per_core(cpu: CpuDetail) -> int | None:
    """The most common sibling count; hybrid CPUs (P- and E-cores) mix 2 and 1."""
    if not cpu.siblings:
        return None
    counts = Counter(len(group) for group in cpu.siblings.values())
    return max(counts, key=lambda n: (counts[n], n))


# nvml.h: NVML_AFFINITY_SCOPE_NODE; the CPU set is returned as an array of 64-bit words
_SCOPE_NODE = 0
_WORD_BITS = 64


def nvml_affinity(indices: Sequence[int]) -> dict[int, tuple[int | None, tuple[int, ...] | None]]:
    """GPU index -> (NUMA node or None, CPUs near it or None), for the GPUs NVML knows."""
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:  # NVMLError has no stable base to name; any failure means "no answer"
        return {}
    out: dict[int, tuple[int | None, tuple[int, ...] | None]] = {}
    try:
        for index in indices:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:
                continue
            out[index] = (_node(nvml, handle), _cpus(nvml, handle))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return out


def _node(nvml: Any, handle: Any) -> int | None:
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
    except Exception:
        return None
    return node if node >= 0 else None


def _cpus(nvml: Any, handle: Any) -> tuple[int, ...] | None:
    try:
        words = nvml.nvmlDeviceGetCpuAffinityWithinScope(
            handle, MAX_CPUS // _WORD_BITS, _SCOPE_NODE
        )
    except Exception:
        return None
    cpus = [
        w * _WORD_BITS + bit
        for w, word in enumerate(words)
        for bit in range(_WORD_BITS)
        if int(word) >> bit & 1
    ]
    return tuple(cpus) or None
