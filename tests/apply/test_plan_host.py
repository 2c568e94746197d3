"""A plan belongs to its host (issue 18, point 3): a plan records the host it was made for,
and `bind`, `exec`, `verify`, `run --bind` and `bind_current_process` refuse one made for
another host, in one line saying what differs, unless `--force` / `allow_foreign=True`.
Real processes; nothing is bound when a plan is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from apply_helpers import thread_cpus

import accelhost
from accelhost.api import plan
from accelhost.apply.driver import differences
from accelhost.plans import Plan, PlannedHost

# CPU 65000 is online on no machine this runs on; node 1 and this PCI address are not here
# either on the test hosts, but only the CPU is relied upon.
FOREIGN_HOST = {"hostname": "big-224", "allowed_cpus": [0, 65000], "numa_nodes": [0, 1]}
FOREIGN = {"devices": {"0": {"main": [0]}}, "host": FOREIGN_HOST}


def _here() -> dict[str, object]:
    """This host's facts as a plan made here records them, under another hostname."""
    nodes = sorted(
        int(n[4:]) for n in os.listdir("/sys/devices/system/node") if n[4:].isdigit()
    ) or [0]
    cpus = sorted(os.sched_getaffinity(0))
    return {"hostname": "a-container", "allowed_cpus": cpus, "numa_nodes": nodes}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_differences_name_what_is_not_so_here() -> None:
    made = PlannedHost("big-224", tuple(range(224)), (0, 1, 2, 3))
    the_plan = Plan.from_dict({"devices": {"0": {"main": [0], "pci": "0000:C1:00.0"}}})
    got = differences(made, the_plan, online=(0, 1), nodes=(0,), pci=["0000:00:01.0"])
    assert got == [
        "its CPUs 2-223 are not online here (here: 0-1)",
        "NUMA nodes 0-3 there, 0 here",
        "device 0's PCI address 0000:C1:00.0 is not on this host",
    ]
    assert differences(made, the_plan, None, None, None) == []  # nothing seen: no verdict
    same = PlannedHost("other-name", (0, 1), (0,))
    assert differences(same, the_plan, (0, 1, 2), (0,), ["0000:c1:00.0"]) == []


def test_a_plan_records_its_host_and_old_plans_without_one_still_load() -> None:
    from ascend_hosts import AscendHost, even_nodes

    host = AscendHost("A2", 1, 8, even_nodes(192, 4), range(192), running=[0, 1]).host()
    made = plan(host)
    assert made.host is not None
    assert made.host.allowed_cpus == tuple(range(192)) and made.host.numa_nodes == (0, 1, 2, 3)
    data = made.to_dict()
    assert data["format"] == "accelhost-plan/1" and set(data["host"]) == {
        "hostname",
        "allowed_cpus",
        "numa_nodes",
    }
    assert Plan.from_dict(data) == made
    del data["host"]
    assert Plan.from_dict(data).host is None


def test_bind_exec_and_verify_refuse_a_plan_of_another_host(spawn, plan_file, cli) -> None:
    child = spawn("worker")
    before = thread_cpus(child.pid, child.tid("worker"))
    path = plan_file(FOREIGN)
    for argv in (
        ["bind", "--plan", path, "--device", "0", "--pid", str(child.pid), "--no-irq"],
        ["exec", "--plan", path, "--device", "0", "--no-irq", "--dry-run", "--", "true"],
        ["verify", "--plan", path, "--device", "0", "--pid", str(child.pid), "--no-irq"],
    ):
        res = cli(*argv)
        assert res.rc == 1, (argv, res.err)
        assert res.err.count("\n") == 1 and res.out == ""
        assert "the plan was made for another host (big-224; this is " in res.err
        assert "its CPUs 65000 are not online here" in res.err and "--force" in res.err
    assert thread_cpus(child.pid, child.tid("worker")) == before
    res = cli(
        "bind", "--plan", path, "--device", "0", "--pid", str(child.pid), "--no-irq", "--force"
    )
    assert res.rc == 0, res.err
    assert thread_cpus(child.pid, child.tid("worker")) == [0]


def test_a_plan_of_this_hardware_under_another_hostname_binds(spawn, plan_file, cli) -> None:
    """A container on the planned host has a hostname of its own: the facts decide."""
    child = spawn("worker")
    path = plan_file({"devices": {"0": {"main": [0]}}, "host": _here()})
    res = cli("bind", "--plan", path, "--device", "0", "--pid", str(child.pid), "--no-irq")
    assert res.rc == 0, res.err
    assert thread_cpus(child.pid, child.tid("worker")) == [0]


def test_run_bind_refuses_a_plan_of_another_host_before_the_start(
    plan_file, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    res = _run("run", "--bind", "0", "--plan", plan_file(FOREIGN), "--", "touch", str(marker))
    assert res.returncode == 1, res.stderr
    assert "the plan was made for another host (big-224" in res.stderr
    assert res.stderr.count("\n") == 1 and not marker.exists()
    res = _run("run", "--force", "--", "true")
    assert res.returncode == 2 and "go with --bind DEVICE" in res.stderr


def test_the_worker_skips_a_plan_of_another_host_unless_allowed() -> None:
    code = (
        "import json, sys, accelhost\n"
        "plan = json.loads(sys.argv[1])\n"
        "for allow in (False, True):\n"
        "    r = accelhost.bind_current_process(plan, 0, allow_foreign=allow, irq=False,\n"
        "                                       migrate_memory=False)\n"
        "    print(json.dumps([r.ok, r.skipped]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, json.dumps(FOREIGN)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    refused, forced = map(json.loads, res.stdout.splitlines())
    assert refused[0] is False and refused[1].startswith("the plan was made for another host")
    assert forced == [True, None]
    try:
        accelhost.bind_current_process(FOREIGN, 0, strict=True, dry_run=True)
    except accelhost.ApplyError as exc:
        assert "its CPUs 65000 are not online here" in str(exc)
    else:
        raise AssertionError("strict=True must raise for a plan of another host")


def test_a_refusal_names_what_differs_first_and_counts_the_rest(plan_file, cli) -> None:
    """A 16-device plan of another host was refused in one line of 1,111 characters that
    listed every PCI address and named the library's allow_foreign=True (issue 26)."""
    # addresses in PCI domain 0x00ff, CPU 65000 and node 1000: on no machine this runs on
    devices = {str(n): {"main": [0], "pci": f"00ff:{0xC1 + n:02x}:00.0"} for n in range(16)}
    host = {"hostname": "a3-640", "allowed_cpus": [0, 65000], "numa_nodes": [0, 1000]}
    path = plan_file({"devices": devices, "host": host})
    res = cli("bind", "--plan", path, "--device", "0", "--pid", str(os.getpid()), "--dry-run")
    assert res.rc == 1 and res.out == "" and res.err.count("\n") == 1
    line = res.err.rstrip("\n")
    assert line.startswith("accelhost: the plan was made for another host (a3-640; this is ")
    assert "its CPUs " in line and "are not online here" in line  # the first difference
    assert "; and 17 more differences; --force applies it anyway" in line
    assert "allow_foreign" not in line and "00ff:c1:00.0" not in line
    assert len(line) < 200
    # The library keeps every difference, for a worker's log.
    from accelhost.apply.driver import foreign

    why = foreign(Plan.from_dict({"devices": devices, "host": host}))
    assert why is not None and len(why.differences) == 18
    assert "00ff:d0:00.0" in str(why) and "allow_foreign=True" in str(why)
