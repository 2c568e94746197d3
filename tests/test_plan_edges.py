"""vllm-ascend parity at the edges, on recorded hosts (tests/hosts/):

- a 950 whose worker plan is skipped still plans the host's UVB poll threads, which the
  reference pins before (and whatever becomes of) its worker plan;
- every `uname -m` starting with "arm" (and aarch64) binds, as the reference's
  `is_arm_cpu` decides.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import accelhost
from accelhost.apply import driver
from accelhost.cli.main import main
from accelhost.planner.ascend import TOPO_SKIP

HOSTS = Path(__file__).parent / "hosts"
# A 950 with one running NPU (NPU ID 0), CPUs 0-3 on node 0 and 4-5 on node 1, all
# allowed, `npu-smi info -t topo` printing nothing, UVB poll threads 101 and 201.
SKIPPED_950 = str(HOSTS / "950-6cpu-1npu-no-topo.json")


def test_950_without_affinity_plans_only_the_uvb_threads_on_node0_less_cpu0() -> None:
    host = accelhost.load_snapshot(SKIPPED_950)
    plan = accelhost.plan(host)
    # vllm-ascend: taskset -cp 1,2,3 on threads 101 and 201, then skips the worker
    assert plan.device_type == "950" and plan.mode == "cluster"
    assert plan.worker_skipped == TOPO_SKIP
    assert plan.devices == () and plan.visible == (0,)
    assert plan.host_threads is not None
    assert plan.host_threads.cpus == (1, 2, 3) and plan.host_threads.tids == (101, 201)
    assert plan.worker_skip(0) == TOPO_SKIP and plan.worker_skip(1) is None
    assert plan.host is not None and plan.host.allowed_cpus == tuple(range(6))


def test_950_skipped_worker_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", SKIPPED_950, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["devices"] == {} and data["visible"] == [0]
    assert data["worker_skipped"] == TOPO_SKIP
    assert data["host_threads"] == {
        "pattern": "uvb_poll_window_thread",
        "cpus": [1, 2, 3],
        "tids": [101, 201],
    }
    (message,) = data["messages"]
    assert message.startswith(TOPO_SKIP) and "No device is planned" in message
    assert "CPUs 1-3" in message
    # a plan file: it reads back as the same plan
    assert accelhost.Plan.from_dict(data).to_dict() == data


def test_950_skipped_worker_plan_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--snapshot", SKIPPED_950]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "device type 950, mode cluster, devices 0",
        "",
        f"worker CPU binding skipped: {TOPO_SKIP}",
        "",
        "host threads uvb_poll_window_thread: CPUs 1-3 (tids: 101, 201)",
    ]
    assert captured.err.startswith(f"note: {TOPO_SKIP} No device is planned")


def test_950_skipped_worker_for_a_named_device_too() -> None:
    plan = accelhost.plan(accelhost.load_snapshot(SKIPPED_950), devices=[0])
    assert plan.worker_skipped == TOPO_SKIP and plan.host_threads is not None
    assert accelhost.api.plan_for_device(accelhost.load_snapshot(SKIPPED_950), 0) == plan


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"devices": {}, "worker_skipped": "x", "visible": [0]}, "needs 'host_threads' CPUs"),
        (
            {"devices": {}, "worker_skipped": "x", "host_threads": {"cpus": [1]}},
            "and 'visible' (the devices it is for)",
        ),
        ({"devices": {}, "worker_skipped": "", "visible": [0]}, "must be a non-empty string"),
        ({"devices": {"0": {"main": [0]}}, "worker_skipped": 3}, "must be a non-empty string"),
    ],
)
def test_a_skipped_worker_plan_file_must_still_have_something_to_apply(
    data: dict[str, object], problem: str
) -> None:
    with pytest.raises(accelhost.PlanError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        accelhost.Plan.from_dict(data, source="plan.json")


# 32-bit ARM kernels (armv6l, armv7l) and the compat names of 64-bit ones (armv8, armv8l):
# vllm-ascend binds on all of them (`platform.machine().lower()` starting with "arm").
@pytest.mark.parametrize(
    ("name", "machine"),
    [("a2-armv7l", "armv7l"), ("a3-armv8", "armv8"), ("310p-armv6l", "armv6l")],
)
def test_every_arm_machine_binds_as_the_reference_does(name: str, machine: str) -> None:
    host = accelhost.load_snapshot(str(HOSTS / f"{name}.json"))
    assert host.machine == machine
    plan = accelhost.plan(host)
    assert plan.devices  # a whole plan: only the machine name is at stake
    assert driver.arch_skip(plan, False, host.machine) is None
    assert driver.arch_skip(plan, False, host.machine.upper()) is None  # lower-cased first


@pytest.mark.parametrize("machine", ["x86_64", "amd64", "i686", "ppc64le", "riscv64", "s390x"])
def test_other_machines_still_skip_ascend_plans(machine: str) -> None:
    plan = accelhost.plan(accelhost.load_snapshot(str(HOSTS / "a2-armv7l.json")))
    assert driver.arch_skip(plan, False, machine) == driver.NON_ARM
    assert driver.arch_skip(plan, True, machine) is None


def test_docs_show_the_skipped_worker_plan_as_printed(capsys: pytest.CaptureFixture[str]) -> None:
    # docs/bind.md shows it in a `text` block (its path is not a bundled example's)
    page = (HOSTS.parents[1] / "docs" / "bind.md").read_text()
    prompt = "$ accelhost plan --snapshot tests/hosts/950-6cpu-1npu-no-topo.json\n"
    shown = page[page.index(prompt) + len(prompt) :].split("```", 1)[0]
    assert main(["plan", "--snapshot", SKIPPED_950]) == 0
    captured = capsys.readouterr()
    assert shown == captured.out + captured.err
