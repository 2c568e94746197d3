"""The spec's worked examples, through the library and through the CLI."""

from __future__ import annotations

import json

import pytest

import accelhost
from accelhost.cli.main import main
from accelhost.cpulist import parse_cpulist
from ascend_hosts import AscendHost, even_nodes


def pools(plan: accelhost.Plan) -> dict[int, list[int]]:
    return {d.device: list(d.pool) for d in plan.devices}


def r(text: str) -> list[int]:
    return parse_cpulist(text)


def test_a3_640_cpus_16_npus_global_slice() -> None:
    plan = accelhost.plan(accelhost.load_snapshot("example:a3-640cpu-16npu"))
    assert plan.device_type == "A3"
    assert plan.mode == "global_slice"
    assert plan.visible == tuple(range(16))
    for i in range(16):
        assert pools(plan)[i] == list(range(40 * i, 40 * i + 40))
    npu0, npu15 = plan.device(0), plan.device(15)
    assert (npu0.irq, npu0.main, npu0.acl, npu0.release) == ((0, 1), tuple(r("2-37")), (38,), (39,))
    assert (npu15.irq, npu15.acl, npu15.release) == ((600, 601), (638,), (639,))
    assert npu15.main == tuple(r("602-637"))
    assert npu0.numa_node == 0 and npu15.numa_node == 7


@pytest.mark.parametrize(
    ("example", "device", "expected"),
    [("a2-192cpu-8npu-sees-npu0", 0, "144-167"), ("a2-192cpu-8npu-sees-npu2", 2, "168-191")],
)
def test_a2_hidden_npu_pair_never_overlaps(example: str, device: int, expected: str) -> None:
    plan = accelhost.plan(accelhost.load_snapshot(f"example:{example}"))
    assert plan.mode == "topo_affinity"
    assert pools(plan) == {device: r(expected)}
    dev = plan.device(device)
    assert dev.irq == tuple(r(expected)[:2])
    assert dev.release == (r(expected)[-1],)


CLUSTERS_950 = {
    0: "288-303",
    1: "304-319",
    2: "96-111",
    3: "112-127",
    4: "128-143",
    5: "144-159",
    6: "320-335",
    7: "336-351",
}


@pytest.mark.parametrize(
    ("example", "seen"),
    [("950-384cpu-8npu-sees-0123", [0, 1, 2, 3]), ("950-384cpu-8npu-sees-4567", [4, 5, 6, 7])],
)
def test_950_clusters_are_the_same_whichever_npus_a_process_sees(
    example: str, seen: list[int]
) -> None:
    plan = accelhost.plan(accelhost.load_snapshot(f"example:{example}"))
    assert plan.mode == "cluster"
    assert pools(plan) == {n: r(CLUSTERS_950[n]) for n in seen}
    for dev in plan.devices:
        assert dev.main == dev.pool and not dev.irq and not dev.acl and not dev.release
    assert plan.host_threads is not None
    assert plan.host_threads.cpus == tuple(r("1-95"))
    assert plan.host_threads.tids == (815,)


def test_remainder_goes_to_the_lowest_npu_ids() -> None:
    host = AscendHost("A3", 1, 3, even_nodes(17, 1), list(range(17)), running=[0, 1, 2])
    assert pools(accelhost.plan(host.host())) == {0: r("0-5"), 1: r("6-11"), 2: r("12-16")}


def test_two_processes_with_the_same_cpuset_never_overlap() -> None:
    base = dict(
        family="A3",
        chips_per_npu=2,
        npu_count=2,
        nodes=even_nodes(20, 1),
        allowed=list(range(20)),
        running=[0, 3],
    )
    a = accelhost.plan(AscendHost(**base, visible="0").host())  # type: ignore[arg-type]
    b = accelhost.plan(AscendHost(**base, visible="3").host())  # type: ignore[arg-type]
    assert pools(a) == {0: r("0-4")}
    assert pools(b) == {3: r("15-19")}


def test_plan_json_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", "example:a3-640cpu-16npu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["format"] == "accelhost-plan/1"
    assert data["device_type"] == "A3" and data["mode"] == "global_slice"
    assert sorted(data["devices"], key=int) == [str(i) for i in range(16)]
    dev0 = data["devices"]["0"]
    assert dev0["irq"] == [0, 1] and dev0["acl"] == [38] and dev0["release"] == [39]
    assert dev0["main"] == list(range(2, 38)) and dev0["numa_node"] == 0
    assert dev0["pci"] == "0000:c1:00.0"
    # the JSON reads back into the same plan
    plan = accelhost.Plan.from_dict(data)
    assert plan.to_dict() == data


def test_plan_table_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", "example:a2-192cpu-8npu-sees-npu2"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("2 "))
    assert row.split() == ["2", "7", "168-191", "168-169", "170-189", "190", "191", "0000:c3:00.0"]


def test_950_json_has_empty_roles_and_host_threads(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", "example:950-384cpu-8npu-sees-0123", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"]["0"]["irq"] == [] and data["devices"]["0"]["acl"] == []
    assert data["devices"]["0"]["main"] == r("288-303")
    assert data["host_threads"]["cpus"] == r("1-95")


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            {"devices": {"0": {"main": [0], "thread_roles": {"x": {"pattern": "[", "cpus": [1]}}}}},
            "bad pattern '['",
        ),
        ({"devices": {"0": {"main": [10**20]}}}, "beyond any kernel's CPU count"),
        ({"devices": {"0": {"main": [-1]}}}, "non-negative integers"),
        ({"devices": {}}, "non-empty object"),
        ({"format": "other/1", "devices": {"0": {"main": [0]}}}, "unsupported format"),
        ([1, 2], "a plan is a JSON object"),
        ({"devices": {"x": {"main": [0]}}}, "device key 'x' is not an integer"),
        ({"devices": {"0": [0]}}, "device 0 must be an object"),
        ({"devices": {"0": {"irq": []}}}, "device 0 has no CPUs"),
        ({"devices": {"0": {"main": [0], "numa_node": True}}}, "numa_node must be an integer"),
        ({"devices": {"0": {"main": [0], "pci": 3}}}, "devices.0.pci must be a string"),
        ({"devices": {"0": {"main": [0], "thread_roles": []}}}, "thread_roles must be an object"),
        (
            {"devices": {"0": {"main": [0], "thread_roles": {"x": {"cpus": [1]}}}}},
            "thread_roles.x needs a 'pattern' string",
        ),
        (
            {"devices": {"0": {"main": [0], "thread_roles": {"x": {"pattern": "a"}}}}},
            "'thread_roles.x.cpus' must be a list",
        ),
        ({"devices": {"0": {"main": "0-3"}}}, "'devices.0.main' must be a list"),
        ({"devices": {"0": {"main": [0]}}, "host_threads": [1]}, "'host_threads' must be an"),
        ({"devices": {"0": {"main": [0]}}, "messages": "hi"}, "'messages' must be a list"),
        ({"devices": {"0": {"main": [0]}}, "visible": [-2]}, "'visible' must be a list"),
    ],
)
def test_malformed_plans_are_refused_when_read(data: dict[str, object], problem: str) -> None:
    with pytest.raises(
        accelhost.PlanError, match=problem.replace("(", r"\(").replace("[", r"\[")
    ) as e:
        accelhost.Plan.from_dict(data, source="plan.json")
    assert str(e.value).startswith("plan.json: ")


def test_host_thread_ids_may_exceed_cpu_ids() -> None:
    plan = accelhost.Plan.from_dict(
        {"devices": {"0": {"main": [0]}}, "host_threads": {"cpus": [1], "tids": [4000000]}}
    )
    assert plan.host_threads is not None and plan.host_threads.tids == (4000000,)
