"""Properties of the Ascend planner over generated hosts."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import accelhost
from accelhost.errors import PlanError
from accelhost.plans import Plan
from ascend_hosts import AscendHost


@st.composite
def hosts(
    draw: st.DrawFn, families: tuple[str, ...] = ("A2", "A3", "310P"), affinity: bool | None = None
) -> AscendHost:
    family = draw(st.sampled_from(families))
    chips = 2 if family == "A3" else draw(st.integers(1, 2))
    npus = draw(st.integers(1, 6))
    node_count = draw(st.integers(1, 4))
    per_node = draw(st.integers(6, 48))
    nodes = {n: list(range(n * per_node, (n + 1) * per_node)) for n in range(node_count)}
    total = node_count * per_node
    lo = draw(st.integers(0, total // 4))
    hi = draw(st.integers(max(lo + 1, 3 * total // 4), total))
    allowed = list(range(lo, hi))
    logical = npus * chips
    running = draw(st.lists(st.integers(0, logical - 1), min_size=1, unique=True))
    npu_affinity: dict[int, list[int]] = {}
    if family != "A3" and (draw(st.booleans()) if affinity is None else affinity):
        for n in range(logical):
            node = draw(st.integers(0, node_count - 1))
            npu_affinity[n] = nodes[node]
    return AscendHost(
        family, chips, npus, nodes, allowed, running=sorted(running), affinity=npu_affinity
    )


def plan_or_none(host: AscendHost, **kw: object) -> Plan | None:
    try:
        return accelhost.plan(host.host(), **kw)  # type: ignore[arg-type]
    except PlanError:
        return None


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(hosts())
def test_pools_lie_within_the_allowed_cpus_and_roles_partition_them(host: AscendHost) -> None:
    plan = plan_or_none(host)
    assume(plan is not None)
    assert plan is not None
    allowed = set(host.allowed)
    for dev in plan.devices:
        assert set(dev.pool) <= allowed
        assert len(dev.pool) >= 5
        assert Counter(dev.irq + dev.main + dev.acl + dev.release) == Counter(dev.pool)
        assert dev.irq == dev.pool[:2] and dev.release == dev.pool[-1:]


@SETTINGS
@given(hosts(families=("A3",)), st.data())
def test_global_slice_pools_of_processes_sharing_a_cpuset_never_overlap(
    host: AscendHost, data: st.DataObject
) -> None:
    whole = plan_or_none(host)
    assume(whole is not None)
    assert whole is not None
    seen: dict[int, int] = {}
    for dev in whole.devices:
        for cpu in dev.pool:
            assert cpu not in seen, (
                f"CPU {cpu} in the pools of NPU {seen.get(cpu)} and {dev.device}"
            )
            seen[cpu] = dev.device
    # a process that sees only one of the NPUs gets the very same slice
    one = data.draw(st.sampled_from(sorted(host.running)))
    host.visible = str(one)
    alone = plan_or_none(host)
    assert alone is not None and alone.device(one).pool == whole.device(one).pool


@SETTINGS
@given(hosts(families=("A2", "A3", "310P", "950")))
def test_the_plan_is_a_pure_function_of_the_snapshot(host: AscendHost) -> None:
    first = plan_or_none(host)
    second = plan_or_none(host)
    assert (first is None) == (second is None)
    if first is not None and second is not None:
        assert first.to_dict() == second.to_dict()
        assert Plan.from_dict(first.to_dict()).to_dict() == first.to_dict()


@SETTINGS
@given(hosts(families=("A2", "310P"), affinity=True))
def test_topo_affinity_identical_affinities_split_without_overlap(host: AscendHost) -> None:
    plan = plan_or_none(host)
    assume(plan is not None)
    assert plan is not None
    by_aff: dict[tuple[int, ...], list[int]] = {}
    for dev in plan.devices:
        by_aff.setdefault(tuple(host.affinity[dev.device]), []).append(dev.device)
    for members in by_aff.values():
        cpus = [c for m in members for c in plan.device(m).pool]
        assert len(cpus) == len(set(cpus))
