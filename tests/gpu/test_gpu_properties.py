"""Properties over random GPU hosts: pools inside the allowed CPUs, `exclusive` never splits
SMT siblings or shares a CPU, and nothing depends on the order sysfs or nvidia-smi list in."""

from __future__ import annotations

import random
from typing import Any

from gpu_hosts import RandomCase, random_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelhost.errors import PlanError
from accelhost.planner.gpu import STRATEGIES, plan_gpus
from accelhost.plans import Plan
from accelhost.readers.gpu import read_gpu_topology

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def cases(draw: Any) -> RandomCase:
    return random_case(draw)


def plan_or_reason(case: RandomCase, strategy: str, seed: int | None = None) -> Plan | str:
    shuffle = None if seed is None else random.Random(seed)
    facts = read_gpu_topology(case.host.host(shuffle))
    assert facts is not None
    try:
        return plan_gpus(facts, strategy=strategy)
    except PlanError as exc:
        return exc.reason


@SETTINGS
@given(case=cases(), strategy=st.sampled_from(STRATEGIES))
def test_pools_are_non_empty_and_within_the_allowed_cpus(case: RandomCase, strategy: str) -> None:
    plan = plan_or_reason(case, strategy)
    if isinstance(plan, str):
        return
    allowed = set(case.host.all_cpus() if case.host.allowed is None else case.host.allowed)
    for dev in plan.devices:
        assert dev.pool
        assert set(dev.pool) <= allowed
        assert len(set(dev.pool)) == len(dev.pool)
        assert dev.main == dev.pool


@SETTINGS
@given(case=cases())
def test_exclusive_never_splits_siblings_nor_shares_cpus(case: RandomCase) -> None:
    plan = plan_or_reason(case, "exclusive")
    if isinstance(plan, str):
        return
    owner: dict[int, int] = {}
    allowed = set(case.host.all_cpus() if case.host.allowed is None else case.host.allowed)
    for dev in plan.devices:
        for cpu in dev.pool:
            assert cpu not in owner, f"CPU {cpu} in GPU {owner.get(cpu)} and GPU {dev.device}"
            owner[cpu] = dev.device
    for cpu, gpu in owner.items():
        for sibling in case.host.sibling_group(cpu):
            if sibling in allowed:
                assert owner.get(sibling) == gpu, f"siblings {cpu}, {sibling} split"


@SETTINGS
@given(case=cases(), strategy=st.sampled_from(STRATEGIES), seed=st.integers(0, 2**32 - 1))
def test_listing_order_does_not_matter(case: RandomCase, strategy: str, seed: int) -> None:
    assert plan_or_reason(case, strategy, seed) == plan_or_reason(case, strategy)
