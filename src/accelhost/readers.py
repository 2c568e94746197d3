"""Read a host's topology through the host door: the one place that decides what to read.

A live read runs the independent commands at once (`run_many`), so the whole read costs
about the slowest `npu-smi` call, not their sum.
"""

from __future__ import annotations

from accelhost.cpulist import parse_cpulist
from accelhost.errors import ParseError
from accelhost.family import family_from_chip_names, normalize_family
from accelhost.host.base import Host
from accelhost.parsers.lscpu import parse_cpu_nodes, parse_threads_per_core
from accelhost.parsers.npusmi_info import parse_npu_smi_info
from accelhost.parsers.npusmi_map import parse_npu_map
from accelhost.parsers.npusmi_topo import parse_npu_topo
from accelhost.parsers.procstatus import parse_allowed_cpus
from accelhost.parsers.ps import parse_thread_ids
from accelhost.parsers.sysfs import cgroup_cpuset_candidates
from accelhost.topology import Accelerator, Topology

NPU_MAP = ["npu-smi", "info", "-m"]
NPU_INFO = ["npu-smi", "info"]
NPU_TOPO = ["npu-smi", "info", "-t", "topo"]
LSCPU_NODES = ["lscpu", "-e=CPU,NODE"]
LSCPU = ["lscpu"]
PS_THREADS = ["ps", "-Te"]
ASCEND_VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
STATUS = "/proc/self/status"


def read_topology(host: Host, device_type: str | None = None) -> Topology:
    """Everything the planners need about `host`.

    The family is `device_type` if given, else the host's recorded one, else told from the
    chip names; GPU hosts (no npu-smi) are read by `accelhost.gpu`.
    """
    family = normalize_family(device_type) if device_type else None
    if family is None and host.device_type:
        family = normalize_family(host.device_type)
    if family in ("nvidia", "pci"):
        return _read_gpu_or_cpu(host, family)
    results = host.run_many([NPU_MAP, NPU_INFO, NPU_TOPO, LSCPU_NODES, LSCPU])
    map_res, info_res, topo_res, nodes_res, lscpu_res = results
    if family is None and map_res is None and info_res is None:
        return _read_gpu_or_cpu(host, None)
    return ascend_topology(
        host,
        family,
        map_text=map_res.stdout if map_res else None,
        info_text=info_res.stdout if info_res else None,
        topo_text=topo_res.stdout if topo_res else None,
        nodes_text=nodes_res.stdout if nodes_res else None,
        lscpu_text=lscpu_res.stdout if lscpu_res else None,
    )


def ascend_topology(
    host: Host,
    family: str | None,
    *,
    map_text: str | None,
    info_text: str | None,
    topo_text: str | None,
    nodes_text: str | None,
    lscpu_text: str | None,
) -> Topology:
    """Assemble an Ascend topology from the command outputs (pure but for ps / files)."""
    entries = parse_npu_map(map_text)
    info = parse_npu_smi_info(info_text)
    notes: list[str] = []
    if family is None:
        family = family_from_chip_names([e.name for e in entries] + list(info.names))
        if family is None and (entries or info.chips):
            notes.append("cannot tell the Ascend family from the chip names; pass --device-type")
    cpu_node, node_cpus = parse_cpu_nodes(nodes_text)
    bus = {(c.npu_id, c.chip_id): c.bus_id for c in info.chips}
    accelerators = tuple(
        sorted(
            (
                Accelerator(
                    index=e.logical_id,
                    name=e.name,
                    npu_id=e.npu_id,
                    chip_id=e.chip_id,
                    pci=bus.get((e.npu_id, e.chip_id)),
                )
                for e in entries
            ),
            key=lambda a: a.index,
        )
    )
    tids: tuple[int, ...] = ()
    if family == "950":
        ps = host.run(PS_THREADS)
        tids = tuple(parse_thread_ids(ps.stdout if ps else None))
    return Topology(
        machine=host.machine,
        family=family,
        allowed_cpus=tuple(parse_allowed_cpus(host.read_file(STATUS))),
        cpu_node=cpu_node,
        node_cpus=node_cpus,
        cpuset=read_cgroup_cpuset(host),
        threads_per_core=parse_threads_per_core(lscpu_text),
        accelerators=accelerators,
        affinity=parse_npu_topo(topo_text),
        processes=info.processes,
        process_table_npu_id=info.id_column == "NPU ID",
        visible_env=host.getenv(ASCEND_VISIBLE),
        host_thread_tids=tids,
        notes=tuple(notes),
    )


def _read_gpu_or_cpu(host: Host, family: str | None) -> Topology:
    try:
        from accelhost import gpu
    except ImportError:  # pragma: no cover - the gpu package ships with accelhost
        gpu = None  # type: ignore[assignment]
    if gpu is not None:
        facts = gpu.read_gpu_facts(host)
        if facts is not None:
            return gpu.gpu_topology(facts)
    return cpu_only_topology(host, family)


def cpu_only_topology(host: Host, family: str | None = None) -> Topology:
    """CPUs and NUMA nodes of a host with no accelerator we can see."""
    nodes_res, lscpu_res = host.run_many([LSCPU_NODES, LSCPU])
    cpu_node, node_cpus = parse_cpu_nodes(nodes_res.stdout if nodes_res else None)
    if not cpu_node:
        cpu_node, node_cpus = _sysfs_nodes(host)
    return Topology(
        machine=host.machine,
        family=family,
        allowed_cpus=tuple(parse_allowed_cpus(host.read_file(STATUS))),
        cpu_node=cpu_node,
        node_cpus=node_cpus,
        cpuset=read_cgroup_cpuset(host),
        threads_per_core=parse_threads_per_core(lscpu_res.stdout if lscpu_res else None),
    )


def _sysfs_nodes(host: Host) -> tuple[dict[int, int], dict[int, tuple[int, ...]]]:
    cpu_node: dict[int, int] = {}
    node_cpus: dict[int, tuple[int, ...]] = {}
    for name in host.list_dir("/sys/devices/system/node") or []:
        if name.startswith("node") and name[4:].isdigit():
            text = host.read_file(f"/sys/devices/system/node/{name}/cpulist") or ""
            try:
                cpus = parse_cpulist(text, f"/sys/devices/system/node/{name}/cpulist")
            except ParseError:
                continue
            node = int(name[4:])
            node_cpus[node] = tuple(cpus)
            for cpu in cpus:
                cpu_node[cpu] = node
    return cpu_node, dict(sorted(node_cpus.items()))


def read_cgroup_cpuset(host: Host, pid: int | str = "self") -> tuple[int, ...] | None:
    """The effective cpuset of a process's cgroup (v2 or v1); None when unknown.

    It is the truer source of a container's CPUs: `Cpus_allowed_list` shrinks when
    something (libgomp with OMP_PROC_BIND) pinned the process earlier.
    """
    cgroup = host.read_file(f"/proc/{pid}/cgroup")
    if not cgroup:
        return None
    for path in cgroup_cpuset_candidates(cgroup):
        text = host.read_file(path)
        if text is not None and text.strip():
            try:
                return tuple(parse_cpulist(text, path))
            except ParseError:
                return None
    return None
