"""The four strategies on recorded hosts, CPU for CPU, and every refusal."""

from __future__ import annotations

import pytest
from gpu_hosts import FakeGpu, FakeHost, dgx_like, smt_pairs

from accelhost.cpulist import format_cpulist, parse_cpulist
from accelhost.errors import PlanError
from accelhost.planner.gpu import plan_gpus
from accelhost.plans import Plan
from accelhost.readers.gpu import read_gpu_topology
from accelhost.topology import Topology


def facts_of(host: FakeHost) -> Topology:
    facts = read_gpu_topology(host.host())
    assert facts is not None
    return facts


def pools(plan: Plan) -> dict[int, str]:
    return {d.device: format_cpulist(d.pool) for d in plan.devices}


def cpus(text: str) -> tuple[int, ...]:
    return tuple(parse_cpulist(text))


# --- a DGX H100-like host: 2 sockets x 56 cores x 2 threads, GPUs 0-3 on node 0 ---------

DGX_NODE = {
    **{i: "0-55,112-167" for i in range(4)},
    **{i: "56-111,168-223" for i in range(4, 8)},
}


@pytest.mark.parametrize("strategy", ["node", "socket", "core-complex"])
def test_dgx_node_socket_and_core_complex_give_the_whole_node(strategy: str) -> None:
    plan = plan_gpus(facts_of(dgx_like()), strategy=strategy)
    assert pools(plan) == DGX_NODE
    assert plan.mode == strategy
    assert plan.device_type == "nvidia"
    assert plan.visible == tuple(range(8))


def test_dgx_exclusive_is_the_default_and_cuts_14_cores_per_gpu() -> None:
    plan = plan_gpus(facts_of(dgx_like()))
    assert plan.mode == "exclusive"
    assert pools(plan) == {
        0: "0-13,112-125",
        1: "14-27,126-139",
        2: "28-41,140-153",
        3: "42-55,154-167",
        4: "56-69,168-181",
        5: "70-83,182-195",
        6: "84-97,196-209",
        7: "98-111,210-223",
    }
    dev = plan.device(5)
    assert dev.main == dev.pool
    assert (dev.irq, dev.acl, dev.release) == ((), (), ())
    assert dev.numa_node == 1
    assert dev.pci == "0000:c3:00.0"


def test_plan_json_keys_devices_by_gpu_index() -> None:
    data = plan_gpus(facts_of(dgx_like()), strategy="exclusive").to_dict()
    assert data["device_type"] == "nvidia"
    assert data["mode"] == "exclusive"
    assert list(data["devices"]) == [str(i) for i in range(8)]
    assert data["devices"]["0"]["pool"][:3] == [0, 1, 2]
    assert data["devices"]["0"]["pci"] == "0000:1b:00.0"
    assert data["messages"] == []


# --- exclusive: remainders, SMT, refusals -----------------------------------------------


def one_node(cores: int, gpus: int, smt: bool, **kw: object) -> FakeHost:
    cpus_ = list(range(cores * (2 if smt else 1)))
    return FakeHost(
        nodes={0: cpus_},
        gpus=[FakeGpu(i, f"0000:{0x20 + i:02x}:00.0", 0) for i in range(gpus)],
        siblings=smt_pairs(cores) if smt else (),
        **kw,  # type: ignore[arg-type]
    )


def test_exclusive_gives_the_remainder_to_the_lowest_gpus() -> None:
    plan = plan_gpus(facts_of(one_node(10, 3, smt=False)))
    assert pools(plan) == {0: "0-3", 1: "4-6", 2: "7-9"}


def test_exclusive_keeps_smt_siblings_together() -> None:
    plan = plan_gpus(facts_of(one_node(10, 3, smt=True)))
    assert pools(plan) == {0: "0-3,10-13", 1: "4-6,14-16", 2: "7-9,17-19"}


def test_exclusive_keys_a_core_by_its_lowest_sibling_even_when_not_allowed() -> None:
    # CPU 0 is outside the cpuset; its sibling 10 still stands for core 0 (as in torchrun)
    host = one_node(10, 3, smt=True, allowed=list(range(1, 20)))
    plan = plan_gpus(facts_of(host))
    assert pools(plan) == {0: "1-3,10-13", 1: "4-6,14-16", 2: "7-9,17-19"}


def test_exclusive_refuses_fewer_cores_than_gpus_on_a_node() -> None:
    with pytest.raises(PlanError) as err:
        plan_gpus(facts_of(one_node(2, 3, smt=True)))
    assert "NUMA node 0 has 2 allowed physical core(s) for 3 GPUs (0, 1, 2)" in err.value.reason


def test_one_gpu_that_cannot_be_planned_refuses_the_whole_plan() -> None:
    host = dgx_like(allowed=parse_cpulist("0-55,112-167,56"))  # node 1 keeps one core
    with pytest.raises(PlanError) as err:
        plan_gpus(facts_of(host))
    assert "NUMA node 1 has 1 allowed physical core(s) for 4 GPUs (4, 5, 6, 7)" in str(err.value)
    # planning only the GPUs of node 0 still cuts for every visible GPU, so it refuses too
    with pytest.raises(PlanError):
        plan_gpus(facts_of(host), devices=[0])


# --- nodes without information, without CPUs, outside the cpuset ------------------------


def test_minus_one_node_on_a_one_node_host_is_node_0_without_warning() -> None:
    host = one_node(8, 2, smt=True)
    host.gpus = [FakeGpu(0, "0000:00:1e.0", -1), FakeGpu(1, "0000:00:1f.0", -1)]
    plan = plan_gpus(facts_of(host))
    assert pools(plan) == {0: "0-3,8-11", 1: "4-7,12-15"}
    assert plan.messages == ()
    assert all(d.numa_node == 0 for d in plan.devices)


def test_minus_one_node_on_a_two_node_host_warns_and_local_cpulist_fixes_it() -> None:
    host = dgx_like()
    host.gpus = [
        FakeGpu(0, "0000:1b:00.0", -1, local_cpus=cpus("0-55,112-167")),
        FakeGpu(1, "0000:9d:00.0", -1, local_cpus=cpus("56-111,168-223")),
    ]
    facts = facts_of(host)
    plan = plan_gpus(facts, strategy="node")
    assert pools(plan) == {0: "0-55,112-167", 1: "0-55,112-167"}
    assert any("GPU 1 (0000:9d:00.0) reports numa_node -1" in m for m in plan.messages)
    fixed = plan_gpus(facts, strategy="node", numa_from="local_cpulist")
    assert pools(fixed) == {0: "0-55,112-167", 1: "56-111,168-223"}
    assert fixed.device(1).numa_node == 1


def grace_like(**kw: object) -> FakeHost:
    """GB200-like: two 72-core Grace CPUs (nodes 0, 1), GPU memory as CPU-less nodes 2-5."""
    nodes = {0: list(range(72)), 1: list(range(72, 144)), 2: [], 3: [], 4: [], 5: []}
    gpus = [
        FakeGpu(0, "0008:01:00.0", 0),
        FakeGpu(1, "0009:01:00.0", 0),
        FakeGpu(2, "0018:01:00.0", 1),
        FakeGpu(3, "0019:01:00.0", 1),
    ]
    args: dict[str, object] = {
        "nodes": nodes,
        "gpus": gpus,
        "packages": {n: (0 if n in (0, 2, 3) else 1) for n in nodes},
        "l3": [list(range(72)), list(range(72, 144))],
        "machine": "aarch64",
    }
    args.update(kw)
    return FakeHost(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", ["node", "socket", "exclusive", "core-complex"])
def test_cpu_less_memory_nodes_are_ignored_when_gpus_sit_on_cpu_nodes(strategy: str) -> None:
    plan = plan_gpus(facts_of(grace_like()), strategy=strategy)
    whole = {0: "0-71", 1: "0-71", 2: "72-143", 3: "72-143"}
    halves = {0: "0-35", 1: "36-71", 2: "72-107", 3: "108-143"}
    assert pools(plan) == (halves if strategy == "exclusive" else whole)


def test_a_gpu_on_a_memory_only_node_is_refused_with_the_way_out() -> None:
    host = grace_like()
    host.gpus = [FakeGpu(0, "0008:01:00.0", 2, local_cpus=list(range(72)))]
    facts = facts_of(host)
    with pytest.raises(PlanError) as err:
        plan_gpus(facts)
    reason = err.value.reason
    assert "GPU 0 (0008:01:00.0) is on NUMA node 2, a memory-only node with no CPUs" in reason
    assert "--numa-from local_cpulist" in reason
    plan = plan_gpus(facts, numa_from="local_cpulist")
    assert pools(plan) == {0: "0-71"}


def test_cpuset_narrower_than_the_node() -> None:
    host = dgx_like(allowed=cpus("16-31,128-143"), env={"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    facts = facts_of(host)
    assert pools(plan_gpus(facts, strategy="node")) == {i: "16-31,128-143" for i in range(4)}
    assert pools(plan_gpus(facts)) == {
        0: "16-19,128-131",
        1: "20-23,132-135",
        2: "24-27,136-139",
        3: "28-31,140-143",
    }


def test_gpu_whose_node_is_outside_the_cpuset_is_refused() -> None:
    host = dgx_like(allowed=cpus("16-31,128-143"))
    with pytest.raises(PlanError) as err:
        plan_gpus(facts_of(host), strategy="node")
    assert "GPU 4 (0000:9d:00.0) is on NUMA node 1, but none of its CPUs" in err.value.reason
    assert "(allowed: 16-31,128-143)" in err.value.reason


# --- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------


def test_visible_gpus_by_uuid_and_reordered_rank_by_cuda_ordinal() -> None:
    host = dgx_like()
    uuid2 = host.gpus[2].uuid_text()
    host.env = {"CUDA_VISIBLE_DEVICES": f"{uuid2[:12]},0"}
    plan = plan_gpus(facts_of(host))
    assert plan.visible == (2, 0)
    # GPU 2 is cuda:0, so it is first on node 0: torchrun ranks by ordinal
    assert pools(plan) == {0: "28-55,140-167", 2: "0-27,112-139"}


def test_visible_list_stops_at_an_unknown_entry_like_cuda() -> None:
    host = dgx_like(env={"CUDA_VISIBLE_DEVICES": "1,9,2"})
    plan = plan_gpus(facts_of(host), strategy="node")
    assert plan.visible == (1,)
    assert any("'9' names no GPU" in m for m in plan.messages)


@pytest.mark.parametrize(
    ("env", "reason"),
    [("", "no visible GPU"), ("1,1", "names GPU 1 twice"), ("-1", "no visible GPU")],
)
def test_visible_refusals(env: str, reason: str) -> None:
    with pytest.raises(PlanError, match=reason):
        plan_gpus(facts_of(dgx_like(env={"CUDA_VISIBLE_DEVICES": env})))


def test_devices_select_from_the_full_plan() -> None:
    facts = facts_of(dgx_like())
    full = plan_gpus(facts)
    one = plan_gpus(facts, devices=[6])
    assert [d.device for d in one.devices] == [6]
    assert one.device(6) == full.device(6)
    with pytest.raises(PlanError, match="GPU 6 is not visible"):
        plan_gpus(facts_of(dgx_like(env={"CUDA_VISIBLE_DEVICES": "0"})), devices=[6])


# --- socket and core-complex details ------------------------------------------------------


def four_nodes_two_sockets() -> FakeHost:
    nodes = {n: list(range(8 * n, 8 * n + 8)) for n in range(4)}
    return FakeHost(
        nodes=nodes,
        gpus=[FakeGpu(0, "0000:10:00.0", 1), FakeGpu(1, "0000:90:00.0", 2)],
        packages={0: 0, 1: 0, 2: 1, 3: 1},
    )


def test_socket_takes_every_node_of_the_socket_own_node_first() -> None:
    plan = plan_gpus(facts_of(four_nodes_two_sockets()), strategy="socket")
    assert plan.device(0).pool == cpus("8-15,0-7")
    assert plan.device(0).numa_node == 1
    assert plan.device(1).pool == cpus("16-31")
    assert plan.device(1).numa_node == 2


def test_socket_skips_nodes_without_allowed_cpus() -> None:
    host = four_nodes_two_sockets()
    host.allowed = cpus("8-31")  # node 0 entirely outside the cpuset
    plan = plan_gpus(facts_of(host), strategy="socket")
    assert plan.device(0).pool == cpus("8-15")


def test_socket_refuses_without_package_ids() -> None:
    host = four_nodes_two_sockets()
    data = host.snapshot()
    data["files"] = {k: v for k, v in data["files"].items() if "physical_package_id" not in k}
    from accelhost.host.snapshot import SnapshotHost

    facts = read_gpu_topology(SnapshotHost(data))
    assert facts is not None
    with pytest.raises(PlanError, match="cannot tell the socket of NUMA node 1"):
        plan_gpus(facts, strategy="socket")


def test_core_complex_orders_by_size_then_lowest_cpu_and_wraps() -> None:
    host = FakeHost(
        nodes={0: list(range(16))},
        gpus=[FakeGpu(i, f"0000:{0x30 + i:02x}:00.0", 0) for i in range(4)],
        l3=[list(range(0, 4)), list(range(4, 12)), list(range(12, 16))],
    )
    plan = plan_gpus(facts_of(host), strategy="core-complex")
    assert pools(plan) == {0: "4-11", 1: "0-3", 2: "12-15", 3: "4-11"}
    # a cpuset that shrinks the first complex moves it behind the third
    host.allowed = [1, 2, 3, *range(4, 16)]
    plan = plan_gpus(facts_of(host), strategy="core-complex")
    assert pools(plan) == {0: "4-11", 1: "12-15", 2: "1-3", 3: "4-11"}


def test_core_complex_refuses_without_cache_information() -> None:
    host = one_node(4, 1, smt=False)  # l3=None: no cache directories
    with pytest.raises(PlanError, match="core-complex needs cache information"):
        plan_gpus(facts_of(host), strategy="core-complex")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"strategy": "cluster"}, "unknown GPU strategy 'cluster'"),
        ({"numa_from": "lscpu"}, "unknown NUMA source 'lscpu'"),
    ],
)
def test_unknown_options_are_refused(kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(PlanError, match=match):
        plan_gpus(facts_of(dgx_like()), **kwargs)  # type: ignore[arg-type]
