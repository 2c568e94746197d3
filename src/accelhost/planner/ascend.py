"""Ascend CPU binding: the same pools and roles as vllm-ascend's `cpu_binding.py`.

Pure functions over a `Topology`. Refusals and skips of the reference raise `PlanError`
with the reference's own message; informational messages are returned in the plan.
The rules are those of the project's spec for Ascend binding (sections 1-6: inputs,
strategy by family, global_slice, topo_affinity, cluster, roles inside a pool).
"""

from __future__ import annotations

from collections.abc import Sequence

from accelhost.cpulist import IDS, format_cpulist
from accelhost.errors import PlanError
from accelhost.planner.visible import visible_ids
from accelhost.plans import UVB_THREAD, DevicePlan, HostThreads, Plan
from accelhost.topology import Topology

MIN_CPUS_PER_NPU = 5
MIN_CPUS_PER_NPU_WITHOUT_IRQ = 3

STRATEGY_BY_FAMILY = {
    "A2": "topo_affinity",
    "310P": "topo_affinity",
    "A3": "global_slice",
    "950": "cluster",
}
ASCEND_STRATEGIES = ("global_slice", "topo_affinity", "cluster")

NO_RUNNING = "Can not get running npu info."
NO_RUNNING_HINT = (
    " (no process runs on a visible NPU yet: name the NPUs to plan for with --device, "
    "e.g. --device 0,1)"
)
TOPO_FALLBACK = "NPU topo affinity not found. action: fallback to global-slice CPU binding."
TOPO_SKIP = "NPU topo affinity not found. action: skip worker CPU binding."
AFFINITY_CONFLICT = "CPUs available in 'Cpus_allowed_list' conflict with NUMA affinity."
NO_NUMA = "lscpu command output error, no NUMA node available. Please check!"
UVB_NOT_FOUND = (
    "uvb_poll_window_thread not found; in Docker, start the container with "
    "--pid=host to see the host's UVB poll threads."
)


def no_family(topo: Topology) -> str:
    return (
        f"cannot tell the accelerator family of {topo.here}; pass --device-type "
        "(A2, A3, 310P, 950, nvidia, pci)"
    )


Pools = dict[int, list[int]]
_new, _set = object.__new__, object.__setattr__


def logical_ids(topo: Topology) -> list[int]:
    """The host's logical NPUs, ascending (from `npu-smi info -m`)."""
    return sorted({a.index for a in topo.accelerators})


def running_npus(topo: Topology) -> list[int]:
    """Logical NPUs with a process on them (any process on the host), ∩ visible, sorted."""
    chips_of: dict[int, dict[int, int]] = {}
    for acc in topo.accelerators:
        if acc.npu_id is not None:
            chips_of.setdefault(acc.npu_id, {})[acc.chip_id or 0] = acc.index
    running: set[int] = set()
    for proc in topo.processes:
        if not chips_of:  # no NPU/chip ids known: the table's NPU id is the logical one
            if proc.chip_id in (None, 0):
                running.add(proc.npu_id)
            continue
        chips = chips_of.get(proc.npu_id, {})
        if proc.chip_id is not None:
            if proc.chip_id in chips:
                running.add(chips[proc.chip_id])
        elif len(chips) > 1:
            raise PlanError(
                f"NPU {proc.npu_id} has {len(chips)} chips but the process table gives no "
                "chip id; cannot tell which logical NPU runs the process."
            )
        elif chips:
            running.add(next(iter(chips.values())))
    if topo.visible_env is not None and topo.visible_env.strip():
        running &= set(visible_ids(topo.visible_env))
    if not running:
        # a failed `npu-smi info` is no process table, not "no process runs"
        why = f" (cannot tell: {'; '.join(topo.unread)})" if topo.unread else NO_RUNNING_HINT
        raise PlanError(NO_RUNNING + why)
    return sorted(running)


def _sorted_unique(cpus: Sequence[int]) -> list[int]:
    """Sorted unique CPUs; a contiguous ascending list (the usual cpuset) is taken as is,
    tested against a slice of the shared id table (a pointer comparison per CPU)."""
    if cpus and cpus[0] >= 0:
        run = IDS[cpus[0] : cpus[0] + len(cpus)]
        if len(run) == len(cpus) and tuple(cpus) == run:
            return list(run)
    return sorted(set(cpus))


def global_slice_pools(
    allowed: Sequence[int], total: int, running: Sequence[int], minimum: int
) -> Pools:
    """Slice the sorted allowed CPUs by global logical NPU id (NUMA ignored on purpose)."""
    cpus = _sorted_unique(allowed)
    if not running or not cpus:
        return {}
    base, extra = divmod(len(cpus), total)
    if base < minimum:
        raise PlanError(
            "Insufficient CPUs for binding with CPU role reservations: "
            f"total_allowed={len(cpus)}, total_npus={total}, min_per_npu={base} (<{minimum}). "
            f"Need at least {total}*{minimum} CPUs in cpuset."
        )
    pools: Pools = {}
    for g in running:
        if g < 0 or g >= total:
            raise PlanError(f"Invalid NPU id {g}, total_npus={total}.")
        start = g * base + min(g, extra)
        pools[g] = cpus[start : start + base + (1 if g < extra else 0)]
    return pools


def _candidates(topo: Topology, running: Sequence[int], allowed: set[int]) -> list[int]:
    """Running NPUs plus hidden ones whose affinity meets our CPUs (so they take part)."""
    touching = {n for n in logical_ids(topo) if not allowed.isdisjoint(topo.affinity.get(n, ()))}
    return sorted(touching.union(running))


def topo_affinity_pools(topo: Topology, running: Sequence[int]) -> Pools:
    allowed_set = set(topo.allowed_cpus)
    node_count = len(topo.node_cpus)
    groups: dict[tuple[int, ...], list[int]] = {}  # NPUs by their (extended) affinity
    for npu in _candidates(topo, running, allowed_set):
        base = [c for c in topo.affinity.get(npu, ()) if c in allowed_set]
        if not base:
            raise PlanError(AFFINITY_CONFLICT)
        nodes = {topo.cpu_node.get(c) for c in base}
        node = nodes.pop() if len(nodes) == 1 else None
        if node is not None and node_count:
            nxt = (node + 1) % node_count
            base = sorted(set(base) | {c for c in topo.node_cpus.get(nxt, ()) if c in allowed_set})
        groups.setdefault(tuple(base), []).append(npu)
    pools: Pools = {}
    for pool_key, members in groups.items():
        if len(members) == 1:
            pools[members[0]] = list(pool_key)
            continue
        ordered = sorted(pool_key)
        size = len(ordered) // len(members)
        for i, npu in enumerate(sorted(members)):
            last = i == len(members) - 1
            pools[npu] = ordered[i * size : None if last else (i + 1) * size]
    return {n: pools[n] for n in running if n in pools}


def host_thread_cpus(topo: Topology) -> list[int]:
    """NUMA node 0's allowed CPUs minus CPU 0: reserved for the host's UVB poll threads."""
    allowed = set(topo.allowed_cpus)
    return [c for c in topo.node_cpus.get(0, ()) if c in allowed and c != 0]


def cluster_pools(topo: Topology, running: Sequence[int]) -> Pools:
    """Ascend 950: one whole CPU cluster per NPU on its affine node. Every PlanError it
    raises is one of the reference's "action: skip worker CPU binding" cases."""
    if not topo.affinity:
        raise PlanError(TOPO_SKIP)
    tpc = topo.threads_per_core
    if tpc not in (1, 2):
        raise PlanError(
            f"unsupported Thread(s) per core: {tpc if tpc is not None else 'unknown'}. "
            "action: skip worker CPU binding."
        )
    size = 8 * tpc
    allowed = set(topo.allowed_cpus)
    reserved = set(host_thread_cpus(topo))
    by_node: dict[int, list[int]] = {}
    for npu in _candidates(topo, running, allowed):
        cpus = [c for c in topo.affinity.get(npu, ()) if c in allowed]
        nodes = {topo.cpu_node.get(c) for c in cpus}
        node = nodes.pop() if len(nodes) == 1 else None
        if node is None:
            raise PlanError(
                f"invalid topo affinity. npu={npu}, cpus={cpus}. action: skip worker CPU binding."
            )
        by_node.setdefault(node, []).append(npu)
    pools: Pools = {}
    for node, npus in sorted(by_node.items()):
        cpus = [
            c for c in sorted(topo.node_cpus.get(node, ())) if c in allowed and c not in reserved
        ]
        clusters = [cpus[i : i + size] for i in range(0, len(cpus) - size + 1, size)]
        if len(clusters) < len(npus):
            raise PlanError(
                f"insufficient CPU clusters. numa={node}, clusters={len(clusters)}, "
                f"npus={sorted(npus)}. action: skip worker CPU binding."
            )
        pools.update(zip(sorted(npus), clusters, strict=False))
    return {n: pools[n] for n in running}


def split_roles(
    device: int, cpus: Sequence[int], family: str, topo: Topology, pci: str | None = None
) -> DevicePlan:
    """IRQ, main, ACL and release CPUs of one pool (the spec's "roles inside a pool")."""
    pool = tuple(cpus)
    minimum = MIN_CPUS_PER_NPU_WITHOUT_IRQ if family == "950" else MIN_CPUS_PER_NPU
    if len(pool) < minimum:
        raise PlanError(
            f"The number of CPUs is insufficient. Each NPU requires at least {minimum} CPUs."
        )
    if family == "950":
        roles = {"irq": (), "main": pool, "acl": (), "release": ()}
    else:
        roles = {"irq": pool[:2], "main": pool[2:-2], "acl": pool[-2:-1], "release": pool[-1:]}
    # An equal DevicePlan built without its frozen __init__ (a plan builds one per NPU);
    # tests/test_plan_rules.py checks that it stays equal.
    plan = _new(DevicePlan)
    node = topo.cpu_node.get(pool[0])  # a pool's NUMA node is the node of its first CPU
    fields = {"device": device, "pool": pool, **roles, "numa_node": node, "pci": pci}
    _set(plan, "__dict__", {**fields, "thread_roles": ()})
    return plan


def plan_ascend(
    topo: Topology, *, strategy: str | None = None, devices: Sequence[int] | None = None
) -> Plan:
    """The reference's plan for the running (or the given) NPUs of an Ascend host."""
    family = topo.family
    if family not in STRATEGY_BY_FAMILY:
        raise PlanError(no_family(topo))
    mode = strategy or STRATEGY_BY_FAMILY[family]
    if mode not in ASCEND_STRATEGIES:
        choices = ", ".join(ASCEND_STRATEGIES)
        raise PlanError(f"strategy {mode!r} does not apply to Ascend (choose from {choices})")
    if devices is not None:
        running = sorted(set(devices))
        known = logical_ids(topo)
        unknown = [d for d in running if known and d not in known]
        if unknown or not running:
            raise PlanError(
                f"NPU {unknown[0] if unknown else '?'} is not on {topo.here} "
                f"(logical NPUs: {', '.join(map(str, known)) or 'none'})"
            )
    else:
        running = running_npus(topo)
    messages: list[str] = []
    minimum = MIN_CPUS_PER_NPU_WITHOUT_IRQ if family == "950" else MIN_CPUS_PER_NPU
    host_threads: HostThreads | None = None
    if mode == "topo_affinity" and not topo.affinity:
        messages.append(TOPO_FALLBACK)
        mode = "global_slice"
    if mode == "cluster":
        if not topo.cpu_node:  # the reference reads the nodes before the UVB threads
            raise PlanError(NO_NUMA)
        host_threads = HostThreads(UVB_THREAD, tuple(host_thread_cpus(topo)), topo.host_thread_tids)
        try:
            pools = cluster_pools(topo, running)
        except PlanError as exc:
            return host_threads_only(family, running, exc.reason, host_threads)
        if not topo.host_thread_tids:
            messages.append(UVB_NOT_FOUND)
    elif mode == "topo_affinity":
        pools = topo_affinity_pools(topo, running)
    else:
        total = len(logical_ids(topo)) or len(topo.affinity) or len(running)
        pools = global_slice_pools(topo.allowed_cpus, total, running, minimum)
    if not topo.cpu_node:
        raise PlanError(NO_NUMA)
    missing = [n for n in running if n not in pools]
    if missing:
        raise PlanError(
            f"no CPU pool for NPU {missing[0]}: the allowed CPU list is empty "
            "('Cpus_allowed_list' of /proc/self/status)"
        )
    pci = {a.index: a.pci for a in topo.accelerators}
    plans = tuple(split_roles(n, pools[n], family, topo, pci.get(n)) for n in running)
    return Plan(
        device_type=family,
        mode=mode,
        visible=tuple(running),
        devices=plans,
        messages=tuple(messages),
        host_threads=host_threads,
    )


def host_threads_only(
    family: str, running: Sequence[int], reason: str, threads: HostThreads
) -> Plan:
    """A 950 whose worker plan is skipped: the reference pins the UVB poll threads before
    its worker plan, and they stay pinned. Nothing left to bind is a refusal."""
    cpus = format_cpulist(threads.cpus)
    if not cpus:
        raise PlanError(
            f"{reason} No CPU of NUMA node 0 but CPU 0 is allowed for the host's "
            f"{UVB_THREAD} threads either: nothing to bind."
        )
    note = (
        f"{reason} No device is planned; the host's {UVB_THREAD} threads are still planned "
        f"on CPUs {cpus}, as vllm-ascend pins them before its worker plan."
    )
    return Plan(
        device_type=family,
        mode="cluster",
        visible=tuple(running),
        devices=(),
        messages=(note,) if threads.tids else (note, UVB_NOT_FOUND),
        host_threads=threads,
        worker_skipped=reason,
    )
