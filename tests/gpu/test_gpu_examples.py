"""The bundled GPU hosts: they hold exactly what the reader reads, and plan as documented."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from gpu_hosts import EXAMPLES, QUERY, TOPO

from accelhost.cpulist import format_cpulist
from accelhost.host.record import RecordingHost
from accelhost.host.snapshot import load_snapshot
from accelhost.planner.gpu import plan_gpus
from accelhost.planner.roles import RoleSpec, add_roles
from accelhost.readers.gpu import read_gpu_topology


def example_data(name: str) -> dict[str, object]:
    path = resources.files("accelhost") / "data" / "examples" / f"{name}.json"
    data: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_examples_hold_exactly_what_the_reader_reads(name: str) -> None:
    data = example_data(name)
    assert data["format"] == "accelhost-snapshot/1"
    assert data["device_type"] == "nvidia"
    assert set(data["commands"]) == {QUERY, TOPO}  # type: ignore[call-overload]
    recorder = RecordingHost(load_snapshot(f"example:{name}"))
    read_gpu_topology(recorder)
    assert recorder.to_snapshot(device_type="nvidia") == data


def plan_of(name: str, strategy: str = "exclusive") -> dict[int, str]:
    facts = read_gpu_topology(load_snapshot(f"example:{name}"))
    assert facts is not None
    return {d.device: format_cpulist(d.pool) for d in plan_gpus(facts, strategy=strategy).devices}


def test_two_socket_eight_gpu_host() -> None:
    assert plan_of("gpu-2socket-8gpu-smt")[3] == "42-55,154-167"
    assert plan_of("gpu-2socket-8gpu-smt", strategy="node")[7] == "56-111,168-223"


def test_one_node_host_with_minus_one_nodes() -> None:
    facts = read_gpu_topology(load_snapshot("example:gpu-1node-numa-minus1"))
    assert facts is not None
    assert {g.numa_node for g in facts.accelerators} == {None}
    plan = plan_gpus(facts)
    assert plan.messages == ()  # one node: -1 can only mean node 0
    assert {d.device: format_cpulist(d.pool) for d in plan.devices} == {
        0: "0-5,24-29",
        1: "6-11,30-35",
        2: "12-17,36-41",
        3: "18-23,42-47",
    }
    dev = add_roles(plan, reserve_irq=1, thread_roles=[RoleSpec("nccl", "NCCL", 1)]).device(2)
    assert (dev.irq, dev.thread_roles[0].cpus) == ((12,), (41,))


def test_cpuset_slice_host() -> None:
    facts = read_gpu_topology(load_snapshot("example:gpu-cpuset-slice"))
    assert facts is not None
    assert format_cpulist(facts.allowed_cpus) == "0-15,112-127"
    assert facts.visible_env == "0,1"
    assert plan_of("gpu-cpuset-slice") == {0: "0-7,112-119", 1: "8-15,120-127"}
    assert plan_of("gpu-cpuset-slice", strategy="socket") == {
        0: "0-15,112-127",
        1: "0-15,112-127",
    }
