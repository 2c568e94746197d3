"""Every refusal, skip and fallback of the binding rules, with the reference's messages."""

from __future__ import annotations

import contextlib
import re

import pytest

import accelhost
from accelhost.cli.main import main
from accelhost.cpulist import parse_cpulist
from accelhost.errors import PlanError
from accelhost.plans import Plan
from ascend_hosts import AscendHost, even_nodes


def plan_of(host: AscendHost, **kw: object) -> accelhost.Plan:
    return accelhost.plan(host.host(), **kw)  # type: ignore[arg-type]


def a2(**kw: object) -> AscendHost:
    base: dict[str, object] = dict(
        family="A2",
        chips_per_npu=1,
        npu_count=4,
        nodes=even_nodes(96, 4),
        allowed=list(range(96)),
        running=[0],
        affinity={0: range(0, 24), 1: range(24, 48), 2: range(48, 72), 3: range(72, 96)},
    )
    base.update(kw)
    return AscendHost(**base)  # type: ignore[arg-type]


def test_no_running_npu_is_refused_with_a_hint_for_devices() -> None:
    with pytest.raises(PlanError) as err:
        plan_of(a2(running=[]))
    assert str(err.value).startswith("Can not get running npu info.")
    assert "--device 0,1" in str(err.value)


def test_visible_devices_filter_out_every_running_npu() -> None:
    with pytest.raises(PlanError, match="Can not get running npu info"):
        plan_of(a2(running=[1], visible="0"))


def test_devices_option_plans_before_the_engine_starts() -> None:
    plan = plan_of(a2(running=[]), devices=[1, 3])
    assert plan.visible == (1, 3)
    assert [d.device for d in plan.devices] == [1, 3]


def test_devices_option_refuses_unknown_ids() -> None:
    with pytest.raises(PlanError, match="NPU 9 is not on the recorded host"):
        plan_of(a2(), devices=[9])


def test_every_process_row_on_the_host_counts() -> None:
    # processes of other containers mark their NPUs as running too; visibility filters them
    plan = plan_of(a2(running=[0, 2], visible=None))
    assert plan.visible == (0, 2)


def test_insufficient_cpus_message() -> None:
    host = AscendHost("A3", 2, 2, even_nodes(16, 1), list(range(16)), running=[0])
    with pytest.raises(PlanError) as err:
        plan_of(host)
    assert str(err.value) == (
        "Insufficient CPUs for binding with CPU role reservations: total_allowed=16, "
        "total_npus=4, min_per_npu=4 (<5). Need at least 4*5 CPUs in cpuset."
    )


def test_invalid_npu_id_when_total_comes_from_affinity() -> None:
    # no logical map: total = affinity entries (2); a process on NPU 5 is out of range
    host = AscendHost(
        "A3",
        1,
        6,
        even_nodes(40, 1),
        list(range(40)),
        running=[5],
        affinity={0: range(40), 1: range(40)},
    )
    data = host.snapshot()
    del data["commands"]["npu-smi info -m"]
    with pytest.raises(PlanError, match=r"^Invalid NPU id 5, total_npus=2\.$"):
        accelhost.plan(accelhost.host.SnapshotHost(data))


def test_topo_affinity_falls_back_to_global_slice_without_affinity() -> None:
    plan = plan_of(a2(affinity={}, running=[1]))
    assert plan.mode == "global_slice"
    assert plan.messages == (
        "NPU topo affinity not found. action: fallback to global-slice CPU binding.",
    )
    assert list(plan.device(1).pool) == list(range(24, 48))


def test_affinity_outside_the_allowed_cpus_conflicts() -> None:
    with pytest.raises(PlanError) as err:
        plan_of(a2(allowed=list(range(24, 48)), running=[0]))
    assert str(err.value) == "CPUs available in 'Cpus_allowed_list' conflict with NUMA affinity."


def test_numa_extension_takes_the_next_node_modulo_node_count() -> None:
    plan = plan_of(a2(running=[3]))
    # node 3 (72-95) extends with node (3+1)%4 = 0 (0-23), sorted
    assert list(plan.device(3).pool) == list(range(0, 24)) + list(range(72, 96))
    assert plan.device(3).numa_node == 0


def test_multi_node_affinity_is_kept_as_written() -> None:
    plan = plan_of(a2(running=[0], affinity={0: [30, 31, 32, 0, 1, 2]}))
    assert list(plan.device(0).pool) == [30, 31, 32, 0, 1, 2]


def test_identical_pools_are_split_and_the_last_takes_the_remainder() -> None:
    host = a2(
        running=[0, 1, 2],
        affinity={0: range(0, 11), 1: range(0, 11), 2: range(0, 11)},
        nodes={0: list(range(0, 11)), 1: list(range(11, 21))},
        allowed=list(range(21)),
    )
    plan = plan_of(host)
    # extended pool 0-20 (21 CPUs) split in 3 chunks of 7
    assert [list(d.pool) for d in plan.devices] == [
        list(range(0, 7)),
        list(range(7, 14)),
        list(range(14, 21)),
    ]


def test_pool_shorter_than_five_cpus_is_refused() -> None:
    host = a2(
        running=[0], affinity={0: [0, 1, 2]}, nodes={0: [0, 1, 2], 1: [3]}, allowed=[0, 1, 2, 3]
    )
    with pytest.raises(PlanError) as err:
        plan_of(host)
    assert (
        str(err.value) == "The number of CPUs is insufficient. Each NPU requires at least 5 CPUs."
    )


def n950(**kw: object) -> AscendHost:
    base: dict[str, object] = dict(
        family="950",
        chips_per_npu=1,
        npu_count=2,
        nodes=even_nodes(64, 2),
        allowed=list(range(64)),
        running=[0, 1],
        threads_per_core=1,
        affinity={0: range(32, 64), 1: range(32, 64)},
    )
    base.update(kw)
    return AscendHost(**base)  # type: ignore[arg-type]


def test_950_reserves_node0_for_host_threads_and_clusters_by_node() -> None:
    plan = plan_of(n950(uvb_tids=[77, 78]))
    assert plan.host_threads is not None
    assert plan.host_threads.cpus == tuple(range(1, 32))
    assert plan.host_threads.tids == (77, 78)
    assert list(plan.device(0).pool) == list(range(32, 40))
    assert list(plan.device(1).pool) == list(range(40, 48))


def test_950_without_uvb_threads_says_to_use_pid_host() -> None:
    plan = plan_of(n950())
    assert any("--pid=host" in m for m in plan.messages)


def skipped_worker(host: AscendHost) -> tuple[str, Plan]:
    """The reason a 950 plan skipped its worker, and the plan (host threads only)."""
    plan = plan_of(host)
    assert plan.devices == () and plan.worker_skipped is not None
    assert plan.visible == tuple(host.running) and plan.mode == "cluster"
    assert plan.host_threads is not None and plan.host_threads.cpus == tuple(range(1, 32))
    assert plan.messages[0].startswith(plan.worker_skipped)
    return plan.worker_skipped, plan


# Each of the reference's "action: skip worker CPU binding" cases still plans (and so
# pins) the UVB poll threads: vllm-ascend pins them before it tries the worker plan.
@pytest.mark.parametrize(
    ("host", "reason"),
    [
        (n950(affinity={}), r"^NPU topo affinity not found\. action: skip worker CPU binding\.$"),
        (n950(threads_per_core=4), r"^unsupported Thread\(s\) per core: 4\. action: skip"),
        (
            n950(affinity={0: [30, 31, 32, 33], 1: range(32, 64)}),
            r"^invalid topo affinity\. npu=0, cpus=\[30, 31, 32, 33\]\. action: skip",
        ),
        (
            n950(npu_count=5, running=[0], affinity={i: range(32, 64) for i in range(5)}),
            r"^insufficient CPU clusters\. numa=1, clusters=4, npus=\[0, 1, 2, 3, 4\]\. action",
        ),
    ],
    ids=["no-affinity", "threads-per-core", "affinity-across-nodes", "too-few-clusters"],
)
def test_950_skipped_worker_still_plans_the_host_threads(host: AscendHost, reason: str) -> None:
    why, plan = skipped_worker(host)
    assert re.search(reason, why), why
    with pytest.raises(PlanError, match="worker CPU binding skipped"):
        plan.device(0)


def test_950_skipped_worker_with_no_host_thread_cpu_is_refused() -> None:
    # node 0 offers only CPU 0 (never given to UVB threads): nothing at all to bind
    host = n950(affinity={}, allowed=[0, *range(32, 64)])
    with pytest.raises(PlanError, match=r"^NPU topo affinity not found\. .* nothing to bind\.$"):
        plan_of(host)


def test_950_cluster_size_follows_threads_per_core() -> None:
    plan = plan_of(n950(threads_per_core=2))
    assert list(plan.device(0).pool) == list(range(32, 48))


def test_310p_physical_layout_two_chips_per_card() -> None:
    plan = accelhost.plan(accelhost.load_snapshot("example:random-310p-2"))
    assert {d.device: list(d.pool) for d in plan.devices} == {
        2: parse_cpulist("24-35"),
        3: parse_cpulist("36-47"),
    }


def test_npu_id_table_with_multi_chip_npu_is_an_error() -> None:
    host = AscendHost(
        "950",
        1,
        2,
        even_nodes(64, 2),
        list(range(64)),
        running=[0],
        affinity={0: range(32, 64), 1: range(32, 64)},
    )
    data = host.snapshot()
    # a map that says NPU 0 has two chips, but a process table without chip ids
    data["commands"]["npu-smi info -m"] = (
        "NPU ID    Chip ID    Chip Logic ID    Chip Name\n"
        "0         0          0                Ascend950DT\n0         1          1     Ascend950DT\n"
    )
    with pytest.raises(PlanError, match="NPU 0 has 2 chips"):
        accelhost.plan(accelhost.host.SnapshotHost(data))


def test_bad_visible_devices_variable() -> None:
    with pytest.raises(PlanError, match="ASCEND_RT_VISIBLE_DEVICES='0,x'"):
        plan_of(a2(visible="0,x"))


def test_unknown_family_asks_for_device_type() -> None:
    data = a2().snapshot()
    del data["device_type"]
    data["commands"]["npu-smi info -m"] = data["commands"]["npu-smi info -m"].replace(
        "910B3", "Mystery9"
    )
    data["commands"]["npu-smi info"] = data["commands"]["npu-smi info"].replace("910B3", "Mystery9")
    host = accelhost.host.SnapshotHost(data)
    with pytest.raises(PlanError, match="--device-type"):
        accelhost.plan(host)
    assert accelhost.plan(host, device_type="a2").device_type == "A2"


def test_family_is_told_from_chip_names() -> None:
    for example, family in [
        ("a3-640cpu-16npu", "A3"),
        ("a2-192cpu-8npu-sees-npu0", "A2"),
        ("950-384cpu-8npu-sees-0123", "950"),
        ("random-310p-2", "310P"),
    ]:
        data = accelhost.load_snapshot(f"example:{example}")
        data._device_type = None  # forget the recorded family
        assert accelhost.plan(data).device_type == family


def test_strategy_override_is_opt_in_and_named() -> None:
    plan = accelhost.plan(
        accelhost.load_snapshot("example:a2-192cpu-8npu-sees-npu0"), strategy="global_slice"
    )
    assert plan.mode == "global_slice"
    with pytest.raises(PlanError, match="does not apply to Ascend"):
        accelhost.plan(
            accelhost.load_snapshot("example:a2-192cpu-8npu-sees-npu0"), strategy="exclusive"
        )


def test_no_accelerator_here_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    data = {
        "format": "accelhost-snapshot/1",
        "machine": "x86_64",
        "files": {"/proc/self/status": "Cpus_allowed_list:\t0-1\n"},
        "commands": {"lscpu -e=CPU,NODE": "CPU NODE\n0 0\n1 0\n"},
    }
    import json
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(data, fh)
        fh.flush()
        assert main(["plan", "--snapshot", fh.name]) == 1
    err = capsys.readouterr().err
    assert err.startswith("accelhost: cannot plan: no accelerator found")
    assert err.count("\n") == 1


def test_cli_refusal_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", "example:a2-192cpu-8npu-sees-npu0", "--device", "9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("accelhost: cannot plan: ") and err.count("\n") == 1


A2_EXAMPLE = "example:a2-192cpu-8npu-sees-npu0"


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--devices", "x"], "argument --device/--devices: not a device list: 'x'"),
        (["--device", "0-99999"], "beyond the limit"),
        (["--device-type", "A9"], "unknown device type 'A9'"),
        (["--reserve-irq", "-1"], "--reserve-irq must be 0 or more"),
        (["--pci", "zz:00.0"], "--pci: not a PCI address: 'zz:00.0'"),
    ],
)
def test_plan_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    with contextlib.suppress(SystemExit):  # argparse's own errors exit through SystemExit
        status = main(["plan", "--snapshot", A2_EXAMPLE, *argv])
        raise SystemExit(status)
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err
    with pytest.raises(SystemExit) as exited:
        raise SystemExit(main(["plan", "--snapshot", A2_EXAMPLE, *argv])) from None
    assert exited.value.code == 2


def test_plan_device_takes_ranges_and_the_devices_alias(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    for flag, value in (("--device", "1-2,5"), ("--devices", "1,2,5"), ("--device", "0-6:2")):
        assert main(["plan", "--snapshot", "example:a3-640cpu-16npu", flag, value, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        want = ["1", "2", "5"] if value != "0-6:2" else ["0", "2", "4", "6"]
        assert sorted(out["devices"], key=int) == want


def test_the_fast_device_plan_is_a_device_plan() -> None:
    """split_roles builds DevicePlan without its frozen __init__: equal in every field."""
    from dataclasses import fields

    from accelhost.planner.ascend import split_roles
    from accelhost.plans import DevicePlan
    from accelhost.topology import Topology

    pool = tuple(range(8, 16))
    topo = Topology("aarch64", "A3", pool, cpu_node=dict.fromkeys(pool, 1))
    fast = split_roles(3, pool, "A3", topo, "0000:c1:00.0")
    slow = DevicePlan(3, pool, pool[:2], pool[2:-2], pool[-2:-1], pool[-1:], 1, "0000:c1:00.0")
    assert set(vars(fast)) == {f.name for f in fields(DevicePlan)}
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
