"""Roles on top of a plan: IRQ CPUs from the front, thread roles from the back, on GPU and
Ascend plans alike."""

from __future__ import annotations

import pytest
from gpu_hosts import dgx_like

from accelhost.cpulist import format_cpulist
from accelhost.errors import PlanError
from accelhost.planner.gpu import plan_gpus
from accelhost.planner.roles import RoleSpec, add_roles
from accelhost.plans import DevicePlan, Plan, ThreadRole
from accelhost.readers.gpu import read_gpu_topology


def gpu_plan() -> Plan:
    facts = read_gpu_topology(dgx_like().host())
    assert facts is not None
    return plan_gpus(facts)


def test_default_gpu_split_is_main_equals_pool() -> None:
    plan = gpu_plan()
    assert add_roles(plan) is plan
    assert all(d.main == d.pool and d.irq == () for d in plan.devices)


def test_reserve_irq_and_thread_roles_on_a_gpu_pool() -> None:
    plan = add_roles(
        gpu_plan(),
        reserve_irq=2,
        thread_roles=[RoleSpec("nccl", "^NCCL", 2), RoleSpec("zmq", "ZMQbg", 1)],
    )
    dev = plan.device(0)  # pool 0-13,112-125
    assert dev.irq == (0, 1)
    assert dev.thread_roles == (
        ThreadRole("nccl", "^NCCL", (124, 125)),
        ThreadRole("zmq", "ZMQbg", (123,)),
    )
    assert format_cpulist(dev.main) == "2-13,112-122"
    assert dev.pool == gpu_plan().device(0).pool
    data = plan.to_dict()["devices"]["0"]
    assert data["thread_roles"]["nccl"] == {"pattern": "^NCCL", "cpus": [124, 125]}
    assert data["irq"] == [0, 1]


def ascend_device() -> DevicePlan:
    # the A3 article's NPU0: IRQ 0,1; main 2-37; acl 38; release 39
    pool = tuple(range(40))
    return DevicePlan(
        device=0, pool=pool, irq=(0, 1), main=pool[2:38], acl=(38,), release=(39,), numa_node=0
    )


def test_roles_on_an_ascend_plan_come_out_of_main() -> None:
    plan = Plan("A3", "global_slice", (0,), (ascend_device(),))
    dev = add_roles(plan, reserve_irq=1, thread_roles=[RoleSpec("engine", "EngineCore", 4)]).device(
        0
    )
    assert dev.irq == (0, 1, 2)
    assert dev.thread_roles == (ThreadRole("engine", "EngineCore", (34, 35, 36, 37)),)
    assert dev.main == tuple(range(3, 34))
    assert (dev.acl, dev.release) == ((38,), (39,))


def test_a_pool_too_small_for_the_roles_is_refused() -> None:
    plan = Plan("nvidia", "exclusive", (0,), (DevicePlan(0, (4, 5, 6), main=(4, 5, 6)),))
    assert add_roles(plan, reserve_irq=1, thread_roles=[RoleSpec("a", "x", 1)]).device(0).main == (
        5,
    )
    with pytest.raises(PlanError) as err:
        add_roles(plan, reserve_irq=2, thread_roles=[RoleSpec("nccl", "NCCL", 1)])
    assert "device 0: its pool of 3 CPUs has 3 main CPU(s), too few for 2 IRQ + 1 nccl" in str(
        err.value
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"reserve_irq": -1}, "must be 0 or more"),
        ({"thread_roles": [RoleSpec("a", "x", 1), RoleSpec("a", "y", 1)]}, "given twice"),
        ({"thread_roles": [RoleSpec("a", "x", 0)]}, "at least one CPU"),
    ],
)
def test_bad_role_requests(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(PlanError, match=match):
        add_roles(gpu_plan(), **kwargs)  # type: ignore[arg-type]


def test_a_role_already_in_the_plan_is_not_added_twice() -> None:
    plan = add_roles(gpu_plan(), thread_roles=[RoleSpec("nccl", "NCCL", 1)])
    with pytest.raises(PlanError, match="already has a thread role 'nccl'"):
        add_roles(plan, thread_roles=[RoleSpec("nccl", "NCCL", 1)])
