"""Reading the facts GPU placement needs, through the host door only.

Everything is read through `Host`, never `os`, so that `RecordingHost` captures exactly
what the planner used and a snapshot replays it. The result is plain immutable data; the
strategies in `accelhost.gpu.strategies` are pure functions of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from accelhost.cpulist import format_cpulist, parse_cpulist
from accelhost.errors import ParseError
from accelhost.host.base import CommandResult, Host
from accelhost.parsers.nvidia_smi import (
    QUERY_GPU_ARGV,
    TOPO_ARGV,
    TopoAffinity,
    parse_query_gpu,
    parse_topo_matrix,
)
from accelhost.parsers.procstat import parse_status_field
from accelhost.parsers.sysfs import (
    CPU_ROOT,
    NODE_ROOT,
    PCI_DEVICES,
    cache_indices_from_dir,
    cgroup_cpuset_candidates,
    node_ids_from_dir,
    normalize_pci_address,
    parse_int_file,
    parse_numa_node,
)

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"
_CACHE_TYPES = {"Data", "Unified"}

# Reads the group of one CPU (its SMT siblings, its cache complex); None when not known.
_GroupReader = Callable[[Host, int], "tuple[int, ...] | None"]


@dataclass(frozen=True)
class GpuInfo:
    """One device. `numa_node` None = unknown (sysfs `-1`, or no source had it).

    `in_sysfs` is False when /sys/bus/pci/devices/<pci> had neither `numa_node` nor
    `local_cpulist`: a mistyped `--pci`, or a container that hides the PCI tree.
    """

    index: int
    pci: str
    uuid: str | None = None
    numa_node: int | None = None
    local_cpus: tuple[int, ...] | None = None
    numa_source: str = "sysfs"
    cpus_source: str = "sysfs"
    in_sysfs: bool = True
    msi_irqs: tuple[int, ...] = ()


@dataclass(frozen=True)
class CpuFacts:
    """The CPU side, as torchrun reads it, plus the cgroup cpuset for reporting.

    `node_cpus` holds every node that exists (CPU-less memory nodes as `()`), in written
    order. `siblings` / `caches` map an allowed CPU to the full sibling list / the CPUs
    sharing its highest-level data or unified cache (allowed or not: torchrun keys cores
    and complexes by their lowest member, allowed or not). `packages` maps CPUs to their
    socket, read for the lowest allowed CPU of each node only.
    """

    allowed: tuple[int, ...]
    node_cpus: Mapping[int, tuple[int, ...]]
    possible_nodes: tuple[int, ...] = ()
    siblings: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    packages: Mapping[int, int] = field(default_factory=dict)
    caches: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    cpuset: tuple[int, ...] | None = None
    cpuset_path: str | None = None
    allowed_source: str = "/proc/self/status"

    @property
    def cpu_node(self) -> dict[int, int]:
        return {cpu: node for node, cpus in self.node_cpus.items() for cpu in cpus}


@dataclass(frozen=True)
class GpuFacts:
    """What a host says about its GPUs (or `--pci` devices) and CPUs.

    `family` is `nvidia` (from nvidia-smi) or `pci` (addresses given by the user, sysfs
    only). `gpus` is in index order and may be empty when nvidia-smi runs but finds none;
    `notes` then says why.
    """

    machine: str
    family: str
    gpus: tuple[GpuInfo, ...]
    cpu: CpuFacts
    visible_env: str | None = None
    notes: tuple[str, ...] = ()

    def gpu(self, index: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)


def read_gpu_facts(host: Host, pci: Sequence[str] | None = None) -> GpuFacts | None:
    """All GPU and CPU facts of `host`; None when it has no nvidia-smi and no `pci` given.

    With `pci`, only sysfs is read (any PCI accelerator, indexed in the given order);
    otherwise the two nvidia-smi commands run together (concurrently on a live host).
    """
    notes: list[str] = []
    topo: dict[int, TopoAffinity] = {}
    rows: list[tuple[int, str, str | None]]
    if pci is not None:
        family = "pci"
        addresses = _pci_list(pci)
        rows = [(i, addr, None) for i, addr in enumerate(addresses)]
        visible_env = None
    else:
        family = "nvidia"
        query, topo_result = host.run_many([list(QUERY_GPU_ARGV), list(TOPO_ARGV)])
        if query is None:
            return None
        rows = _nvidia_rows(query, notes)
        topo = _topo(topo_result, notes)
        visible_env = host.getenv(CUDA_VISIBLE_DEVICES)
    cpu = read_cpu_facts(host, notes)
    gpus = tuple(_read_gpu(host, i, addr, uuid, topo) for i, addr, uuid in rows)
    gpus = _nvml_fill(host, gpus, notes) if family == "nvidia" else gpus
    return GpuFacts(
        machine=host.machine,
        family=family,
        gpus=gpus,
        cpu=cpu,
        visible_env=visible_env,
        notes=tuple(notes),
    )


def _pci_list(pci: Sequence[str]) -> list[str]:
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


def _nvidia_rows(query: CommandResult, notes: list[str]) -> list[tuple[int, str, str | None]]:
    if not query.ok:
        first = next((ln.strip() for ln in query.stdout.splitlines() if ln.strip()), "")
        why = f": {first}" if first else ""
        notes.append(f"nvidia-smi failed (exit status {query.rc}){why}")
        return []
    rows = parse_query_gpu(query.stdout, " ".join(QUERY_GPU_ARGV))
    if not rows:
        notes.append("nvidia-smi lists no GPU")
    return [(r.index, r.pci, r.uuid) for r in rows]


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
    host: Host,
    index: int,
    pci: str,
    uuid: str | None,
    topo: Mapping[int, TopoAffinity],
) -> GpuInfo:
    base = f"{PCI_DEVICES}/{pci}"
    node_text = host.read_file(f"{base}/numa_node")
    cpus_text = host.read_file(f"{base}/local_cpulist")
    irq_names = host.list_dir(f"{base}/msi_irqs") or []
    numa_node = None
    numa_source = "sysfs"
    if node_text is not None:
        numa_node = parse_numa_node(node_text, f"{base}/numa_node")
    local_cpus = None
    cpus_source = "sysfs"
    if cpus_text is not None and cpus_text.strip():
        local_cpus = tuple(parse_cpulist(cpus_text, f"{base}/local_cpulist"))
    row = topo.get(index)
    if node_text is None and row is not None and row.numa_nodes and len(row.numa_nodes) == 1:
        numa_node, numa_source = row.numa_nodes[0], "nvidia-smi topo -m"
    if local_cpus is None and row is not None and row.cpus:
        local_cpus, cpus_source = row.cpus, "nvidia-smi topo -m"
    if node_text is None and numa_source == "sysfs":
        numa_source = "unknown"
    if local_cpus is None and cpus_source == "sysfs":
        cpus_source = "unknown"
    return GpuInfo(
        index=index,
        pci=pci,
        uuid=uuid,
        numa_node=numa_node,
        local_cpus=local_cpus,
        numa_source=numa_source,
        cpus_source=cpus_source,
        in_sysfs=node_text is not None or cpus_text is not None,
        msi_irqs=tuple(sorted(int(n) for n in irq_names if n.isdigit())),
    )


def read_cpu_facts(host: Host, notes: list[str] | None = None) -> CpuFacts:
    """CPUs, nodes, SMT siblings, sockets and caches, as torchrun's rules need them.

    Siblings and caches are read once per core / cache group (the kernel writes the same
    list in every member's file), which keeps a 640-CPU snapshot small.
    """
    notes = [] if notes is None else notes
    possible, node_cpus = _read_nodes(host, notes)
    cpuset, cpuset_path = _read_cpuset(host)
    allowed, allowed_source = _read_allowed(host, cpuset, node_cpus, notes)
    siblings = _read_groups(host, allowed, _read_siblings)
    caches = _read_groups(host, allowed, _read_top_cache)
    packages: dict[int, int] = {}
    allowed_set = set(allowed)
    for node in sorted(node_cpus):
        on_node = [c for c in node_cpus[node] if c in allowed_set]
        if not on_node:
            continue
        lowest = min(on_node)
        path = f"{CPU_ROOT}/cpu{lowest}/topology/physical_package_id"
        text = host.read_file(path)
        if text is not None:
            packages[lowest] = parse_int_file(text, path)
    if cpuset is not None and set(cpuset) != allowed_set:
        notes.append(
            f"allowed CPUs {format_cpulist(allowed)} differ from the cgroup cpuset "
            f"{format_cpulist(cpuset)} ({cpuset_path}); planning uses the allowed CPUs"
        )
    return CpuFacts(
        allowed=allowed,
        node_cpus=node_cpus,
        possible_nodes=possible,
        siblings=siblings,
        packages=packages,
        caches=caches,
        cpuset=cpuset,
        cpuset_path=cpuset_path,
        allowed_source=allowed_source,
    )


def _read_nodes(host: Host, notes: list[str]) -> tuple[tuple[int, ...], dict[int, tuple[int, ...]]]:
    text = host.read_file(f"{NODE_ROOT}/possible")
    if text is not None:
        possible = sorted(set(parse_cpulist(text, f"{NODE_ROOT}/possible")))
    else:
        possible = node_ids_from_dir(host.list_dir(NODE_ROOT) or [])
    node_cpus: dict[int, tuple[int, ...]] = {}
    for node in possible:
        path = f"{NODE_ROOT}/node{node}/cpulist"
        cpus = host.read_file(path)
        if cpus is not None:
            node_cpus[node] = tuple(parse_cpulist(cpus, path))
    if not node_cpus:
        notes.append("no NUMA node information in sysfs; all allowed CPUs count as node 0")
    return tuple(possible), node_cpus


def _read_cpuset(host: Host) -> tuple[tuple[int, ...] | None, str | None]:
    cgroup = host.read_file("/proc/self/cgroup")
    if cgroup is None:
        return None, None
    for path in cgroup_cpuset_candidates(cgroup):
        text = host.read_file(path)
        if text is not None and text.strip():
            return tuple(sorted(set(parse_cpulist(text, path)))), path
    return None, None


def _read_allowed(
    host: Host,
    cpuset: tuple[int, ...] | None,
    node_cpus: Mapping[int, tuple[int, ...]],
    notes: list[str],
) -> tuple[tuple[int, ...], str]:
    status = host.read_file("/proc/self/status")
    value = parse_status_field(status, "Cpus_allowed_list") if status is not None else None
    if value is not None:
        cpus = parse_cpulist(value, "/proc/self/status Cpus_allowed_list")
        return tuple(sorted(set(cpus))), "/proc/self/status"
    if cpuset is not None:
        notes.append("no Cpus_allowed_list in /proc/self/status; using the cgroup cpuset")
        return cpuset, "cgroup cpuset"
    every = sorted({c for cpus in node_cpus.values() for c in cpus})
    notes.append("no Cpus_allowed_list in /proc/self/status; assuming every CPU of every node")
    return tuple(every), "NUMA nodes"


def _read_groups(
    host: Host,
    allowed: Sequence[int],
    read_one: _GroupReader,
) -> dict[int, tuple[int, ...]]:
    """cpu -> its group, reading one file set per group: a CPU already seen in an earlier
    CPU's group shares it."""
    out: dict[int, tuple[int, ...]] = {}
    for cpu in sorted(allowed):
        if cpu in out:
            continue
        group = read_one(host, cpu)
        if group is None:
            continue
        members = tuple(sorted(set(group) | {cpu}))
        for member in members:
            out.setdefault(member, members)
    allowed_set = set(allowed)
    return {cpu: grp for cpu, grp in sorted(out.items()) if cpu in allowed_set}


def _read_siblings(host: Host, cpu: int) -> tuple[int, ...] | None:
    path = f"{CPU_ROOT}/cpu{cpu}/topology/thread_siblings_list"
    text = host.read_file(path)
    return None if text is None else tuple(parse_cpulist(text, path))


def _read_top_cache(host: Host, cpu: int) -> tuple[int, ...] | None:
    """CPUs sharing `cpu`'s highest-level data or unified cache (ties: lowest index)."""
    base = f"{CPU_ROOT}/cpu{cpu}/cache"
    best: tuple[int, int] | None = None  # (level, index)
    for k in cache_indices_from_dir(host.list_dir(base) or []):
        kind = host.read_file(f"{base}/index{k}/type")
        if kind is None or kind.strip() not in _CACHE_TYPES:
            continue
        level_path = f"{base}/index{k}/level"
        level_text = host.read_file(level_path)
        if level_text is None:
            continue
        level = parse_int_file(level_text, level_path)
        if best is None or level > best[0]:
            best = (level, k)
    if best is None:
        return None
    path = f"{base}/index{best[1]}/shared_cpu_list"
    text = host.read_file(path)
    return None if text is None else tuple(parse_cpulist(text, path))


def _nvml_fill(host: Host, gpus: tuple[GpuInfo, ...], notes: list[str]) -> tuple[GpuInfo, ...]:
    """Last resort for GPUs whose node and CPUs neither sysfs nor `topo -m` gave.

    Live hosts only (NVML cannot be replayed), and only when nvidia-ml-py is installed.
    """
    missing = [g for g in gpus if g.numa_node is None and g.local_cpus is None]
    if not missing or not host.is_live:
        return gpus
    from accelhost.gpu.nvml import nvml_affinity

    found = nvml_affinity([g.index for g in missing])
    if not found:
        return gpus
    out = []
    for gpu in gpus:
        hit = found.get(gpu.index)
        if hit is None or gpu not in missing:
            out.append(gpu)
            continue
        node, cpus = hit
        notes.append(f"GPU {gpu.index}: NUMA node and CPUs from NVML (not kept in snapshots)")
        out.append(
            GpuInfo(
                index=gpu.index,
                pci=gpu.pci,
                uuid=gpu.uuid,
                numa_node=node,
                local_cpus=cpus,
                numa_source="nvml" if node is not None else gpu.numa_source,
                cpus_source="nvml" if cpus is not None else gpu.cpus_source,
                in_sysfs=gpu.in_sysfs,
                msi_irqs=gpu.msi_irqs,
            )
        )
    return tuple(out)
