"""The CPU facts of a host, one reader per fact, all through the host door. NUMA nodes come
from `lscpu -e=CPU,NODE` (what vllm-ascend reads) or sysfs (what torchrun reads)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from accelhost.cpulist import MAX_NODES, format_cpulist, parse_cpulist
from accelhost.host.base import Host
from accelhost.parsers.procstat import find_allowed_cpus
from accelhost.parsers.sysfs import (
    CPU_ROOT,
    NODE_ROOT,
    cache_indices_from_dir,
    cgroup_cpuset_candidates,
    node_ids_from_dir,
    parse_int_file,
)
from accelhost.topology import CpuDetail

LSCPU_NODES = ["lscpu", "-e=CPU,NODE"]
LSCPU = ["lscpu"]
STATUS = "/proc/self/status"
_CACHE_TYPES = {"Data", "Unified"}


def read_allowed_cpus(host: Host, pid: int | str = "self") -> tuple[int, ...] | None:
    """`Cpus_allowed_list` of a process in written order; None when the file or the line
    is absent (each family has its own rule for that case)."""
    path = f"/proc/{pid}/status"
    text = host.read_file(path)
    cpus = None if text is None else find_allowed_cpus(text, path)
    return None if cpus is None else tuple(cpus)


def read_cgroup_cpuset(host: Host, pid: int | str = "self") -> tuple[tuple[int, ...], str] | None:
    """(the effective cpuset of a process's cgroup, sorted; its file), or None: the truer
    source of a container's CPUs, as `Cpus_allowed_list` shrinks when something pinned it."""
    cgroup = host.read_file(f"/proc/{pid}/cgroup")
    if not cgroup:
        return None
    for path in cgroup_cpuset_candidates(cgroup):
        text = host.read_file(path)
        if text is not None and text.strip():
            return tuple(sorted(set(parse_cpulist(text, path)))), path
    return None


def stdout(host: Host, argv: list[str]) -> str | None:
    """What a command printed, however it ended; None when it is not installed."""
    result = host.run(argv)
    return result.stdout if result else None


def read_sysfs_nodes(host: Host) -> dict[int, tuple[int, ...]]:
    """node -> CPUs of each possible node (/sys/devices/system/node); CPU-less memory
    nodes are kept as `()`, in written order."""
    text = host.read_file(f"{NODE_ROOT}/possible")
    if text is not None:
        possible = sorted(set(parse_cpulist(text, f"{NODE_ROOT}/possible", limit=MAX_NODES)))
    else:
        possible = node_ids_from_dir(host.list_dir(NODE_ROOT) or [])
    node_cpus: dict[int, tuple[int, ...]] = {}
    for node in possible:
        path = f"{NODE_ROOT}/node{node}/cpulist"
        if (cpus := host.read_file(path)) is not None:
            node_cpus[node] = tuple(parse_cpulist(cpus, path))
    return node_cpus


def read_cpu_detail(
    host: Host, allowed: Sequence[int], node_cpus: Mapping[int, Sequence[int]], allowed_source: str
) -> CpuDetail:
    """SMT siblings, caches and sockets of the allowed CPUs, as torchrun's rules need them;
    read once per core / cache group, which keeps a 640-CPU snapshot small."""
    allowed_set = set(allowed)
    packages: dict[int, int] = {}
    for node in sorted(node_cpus):
        on_node = [c for c in node_cpus[node] if c in allowed_set]
        if not on_node:
            continue
        lowest = min(on_node)
        path = f"{CPU_ROOT}/cpu{lowest}/topology/physical_package_id"
        if (text := host.read_file(path)) is not None:
            packages[lowest] = parse_int_file(text, path)
    return CpuDetail(
        siblings=_read_groups(host, allowed, _read_siblings),
        packages=packages,
        caches=_read_groups(host, allowed, _read_top_cache),
        allowed_source=allowed_source,
    )


def allowed_or_fallback(
    allowed: tuple[int, ...] | None,
    cpuset: tuple[tuple[int, ...], str] | None,
    node_cpus: Mapping[int, Sequence[int]],
    notes: list[str],
) -> tuple[tuple[int, ...], str]:
    """(allowed CPUs sorted, their source), as torchrun does without `Cpus_allowed_list`:
    the cgroup cpuset, else every CPU of every node. Notes say which was used."""
    if allowed is not None:
        result = tuple(sorted(set(allowed))), STATUS
    elif cpuset is not None:
        notes.append("no Cpus_allowed_list in /proc/self/status; using the cgroup cpuset")
        result = cpuset[0], "cgroup cpuset"
    else:
        notes.append("no Cpus_allowed_list in /proc/self/status; assuming every CPU of every node")
        result = tuple(sorted({c for cpus in node_cpus.values() for c in cpus})), "NUMA nodes"
    if cpuset is not None and set(cpuset[0]) != set(result[0]):
        notes.append(
            f"allowed CPUs {format_cpulist(result[0])} differ from the cgroup cpuset "
            f"{format_cpulist(cpuset[0])} ({cpuset[1]}); planning uses the allowed CPUs"
        )
    return result


def _read_groups(
    host: Host, allowed: Sequence[int], read_one: Callable[[Host, int], tuple[int, ...] | None]
) -> dict[int, tuple[int, ...]]:
    """cpu -> its group (SMT siblings, a cache complex), reading one file set per group: a
    CPU already seen in an earlier CPU's group shares it."""
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
    return {cpu: out[cpu] for cpu in sorted(set(allowed)) if cpu in out}


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
