"""Differential test: our plans against torchrun's own code on the same sysfs facts.

For random hosts (SMT numbering, memory-only nodes, -1 nodes, cut cpusets, reordered
CUDA_VISIBLE_DEVICES) every strategy must give each GPU exactly torchrun's CPU set, and
refuse the plan exactly when torchrun would fail some GPU's worker. The one documented
difference: `socket` skips nodes without allowed CPUs, where torchrun fails.
"""

from __future__ import annotations

from typing import Any

import pytest
from gpu_hosts import RandomCase, dgx_like, random_case
from gpu_torchrun import TorchrunError, torchrun_sets
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelhost.errors import PlanError
from accelhost.planner.gpu import STRATEGIES, plan_gpus
from accelhost.readers.gpu import read_gpu_topology

pytest.importorskip("torch.numa.binding")


@st.composite
def cases(draw: Any) -> RandomCase:
    return random_case(draw)


def _compare(case: RandomCase, strategy: str) -> None:
    snapshot = case.host.snapshot()
    reference = torchrun_sets(snapshot, case.pcis_by_ordinal(), strategy)
    facts = read_gpu_topology(case.host.host())
    assert facts is not None
    try:
        plan = plan_gpus(facts, strategy=strategy)
    except PlanError as exc:
        failures = [r for r in reference if isinstance(r, TorchrunError)]
        assert failures, f"we refused ({exc.reason}) but torchrun planned {reference}"
        return
    order = case.visible if case.visible is not None else sorted(g.index for g in case.host.gpus)
    for ordinal, index in enumerate(order):
        ours = set(plan.device(index).pool)
        theirs = reference[ordinal]
        if isinstance(theirs, TorchrunError):
            assert strategy == "socket", f"GPU {index}: torchrun failed ({theirs}), we gave {ours}"
            allowed = set(facts.allowed_cpus)
            assert any(not allowed.intersection(cpus) for cpus in facts.node_cpus.values())
            continue
        assert ours == theirs, f"GPU {index} (cuda:{ordinal}) {strategy}"


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_dgx_like_host_matches_torchrun(strategy: str) -> None:
    _compare(RandomCase(dgx_like(), None), strategy)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_reordered_visibility_matches_torchrun(strategy: str) -> None:
    host = dgx_like(env={"CUDA_VISIBLE_DEVICES": "3,1,6"})
    _compare(RandomCase(host, [3, 1, 6]), strategy)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), strategy=st.sampled_from(STRATEGIES))
def test_random_hosts_match_torchrun(case: RandomCase, strategy: str) -> None:
    _compare(case, strategy)
