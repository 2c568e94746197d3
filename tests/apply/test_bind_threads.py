"""bind / verify on real processes with named threads; read back from /proc."""

from __future__ import annotations

import json
import os

from apply_helpers import all_thread_cpus, thread_cpus

NAMES = ("acl_thread", "release_thread", "worker", "other")
PLAN = {"devices": {"0": {"main": [0], "acl": [1], "release": [1]}}}


def test_bind_gives_each_thread_its_role(spawn, plan_file, cli):
    child = spawn(*NAMES)
    res = cli("bind", "--plan", plan_file(PLAN), "--device", "0", "--pid", str(child.pid))
    assert res.rc == 0, res.err
    tids = child.tids()
    assert thread_cpus(child.pid, child.pid) == [0]  # the main thread
    assert thread_cpus(child.pid, tids["worker"][0]) == [0]
    assert thread_cpus(child.pid, tids["other"][0]) == [0]
    assert thread_cpus(child.pid, tids["acl_thread"][0]) == [1]
    assert thread_cpus(child.pid, tids["release_thread"][0]) == [1]
    assert f"thread {tids['acl_thread'][0]} (acl_thread)" in res.out


def test_acl_and_release_are_told_apart(spawn, plan_file, cli):
    child = spawn(*NAMES)
    plan = {"devices": {"0": {"main": [0, 1], "acl": [0], "release": [1]}}}
    res = cli("bind", "--plan", plan_file(plan), "--device", "0", "--pid", str(child.pid))
    assert res.rc == 0, res.err
    got = {name: thread_cpus(child.pid, tids[0]) for name, tids in child.tids().items()}
    assert got == {
        "python": [0, 1],
        "acl_thread": [0],
        "release_thread": [1],
        "worker": [0, 1],
        "other": [0, 1],
    }


def test_dry_run_changes_nothing_and_lists_the_real_steps(spawn, plan_file, cli):
    child = spawn(*NAMES)
    os.sched_setaffinity(child.tid("acl_thread"), {0})  # a state bind would change
    before = all_thread_cpus(child)
    args = ("bind", "--plan", plan_file(PLAN), "--device", "0", "--pid", str(child.pid))
    dry = cli(*args, "--dry-run", "--json")
    assert dry.rc == 0
    assert all_thread_cpus(child) == before
    real = cli(*args, "--json")
    assert real.rc == 0
    dry_steps = [s["description"] for s in json.loads(dry.out)["steps"]]
    real_steps = [s["description"] for s in json.loads(real.out)["steps"]]
    assert dry_steps == real_steps
    assert {s["status"] for s in json.loads(dry.out)["steps"]} == {"planned"}
    assert all_thread_cpus(child) != before


def test_verify_passes_then_names_the_repinned_thread(spawn, plan_file, cli):
    child = spawn(*NAMES)
    path = plan_file(PLAN)
    assert cli("bind", "--plan", path, "--device", "0", "--pid", str(child.pid)).rc == 0
    ok = cli("verify", "--plan", path, "--device", "0", "--pid", str(child.pid))
    assert ok.rc == 0, ok.out
    assert "5 threads" in ok.out
    acl = child.tid("acl_thread")
    os.sched_setaffinity(acl, {0})
    bad = cli("verify", "--plan", path, "--device", "0", "--pid", str(child.pid))
    assert bad.rc == 1
    drift = [line for line in bad.out.splitlines() if "drifted:" in line]
    assert drift == [f"thread {acl} (acl_thread) drifted: plan CPUs 1 [acl], actual 0"]


def test_thread_role_with_a_cpu_list_pins_to_exactly_those_cpus(spawn, plan_file, cli):
    child = spawn(*NAMES)
    res = cli(
        "bind",
        "--plan",
        plan_file(PLAN),
        "--device",
        "0",
        "--pid",
        str(child.pid),
        "--thread-role",
        "busy=^work@1",
    )
    assert res.rc == 0, res.err
    assert thread_cpus(child.pid, child.tid("worker")) == [1]
    assert thread_cpus(child.pid, child.tid("other")) == [0]
    ok = cli(
        "verify",
        "--plan",
        plan_file(PLAN),
        "--device",
        "0",
        "--pid",
        str(child.pid),
        "--thread-role",
        "busy=^work@1",
    )
    assert ok.rc == 0, ok.out


def test_a_step_that_fails_gives_partial_status(spawn, plan_file, cli):
    child = spawn(*NAMES)
    plan = {"devices": {"0": {"main": [0], "acl": [4095], "release": [1]}}}
    res = cli("bind", "--plan", plan_file(plan), "--device", "0", "--pid", str(child.pid))
    assert res.rc == 2
    failed = [ln for ln in res.out.splitlines() if ln.startswith("[failed] set affinity")]
    assert len(failed) == 1 and "(acl_thread)" in failed[0]
    assert "acl_thread" not in res.err  # the failed step is said once, not twice
    assert thread_cpus(child.pid, child.tid("release_thread")) == [1]
    assert thread_cpus(child.pid, child.pid) == [0]


def test_memory_step_is_a_noop_on_one_node(spawn, plan_file, cli):
    child = spawn("worker")
    res = cli("bind", "--plan", plan_file(PLAN), "--device", "0", "--pid", str(child.pid), "--json")
    memory = [s for s in json.loads(res.out)["steps"] if s["kind"] == "memory"]
    assert len(memory) == 1
    assert memory[0]["status"] == "noop" and "one-node" in memory[0]["detail"]


def test_omp_variables_are_warned_about(spawn, plan_file, cli):
    child = spawn("worker", env={"OMP_PROC_BIND": "TRUE"})
    res = cli(
        "bind", "--plan", plan_file(PLAN), "--device", "0", "--pid", str(child.pid), "--dry-run"
    )
    assert "OMP_PROC_BIND=TRUE" in res.err and "libgomp" in res.err


def test_mistakes_are_one_line(spawn, plan_file, cli, tmp_path):
    child = spawn("worker")
    pid = child.pid
    from apply_helpers import stop_child

    stop_child(child)
    gone = cli("bind", "--plan", plan_file(PLAN), "--device", "0", "--pid", str(pid))
    assert gone.rc == 1 and gone.err == f"accelhost: process {pid} does not exist\n"
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    res = cli("bind", "--plan", str(bad), "--device", "0", "--pid", str(os.getpid()))
    # a plan file named by the user that is not JSON: a usage error, as a bad snapshot is
    assert res.rc == 2 and res.err.count("\n") == 1 and "not valid JSON" in res.err
    res = cli("bind", "--plan", plan_file(PLAN), "--device", "5", "--pid", str(os.getpid()))
    assert res.rc == 1
    assert res.err == "accelhost: cannot plan: device 5 is not in the plan (planned devices: 0)\n"
    res = cli("bind", "--plan", plan_file(PLAN), "--device", "0")
    assert res.rc == 2 and "--pid PID is required" in res.err  # a usage error
    res = cli("bind", "--plan", plan_file({"devices": {}}), "--device", "0", "--pid", "1")
    assert res.rc == 2 and "Traceback" not in res.err  # a plan file that is no plan


def test_without_a_plan_this_host_is_planned_and_refusals_are_one_line(spawn, cli):
    child = spawn("worker")
    res = cli("bind", "--device", "0", "--pid", str(child.pid))
    # This machine has no accelerator: the planner's refusal, as one line.
    assert res.rc == 1
    assert res.err.startswith("accelhost: cannot plan: ") and res.err.count("\n") == 1


def test_950_host_threads_of_every_process_get_the_host_cpus(spawn, plan_file, cli):
    worker = spawn("uvb_poll_window_thread", "acl_thread")
    daemon = spawn("uvb_poll_window_thread", "idle")  # another process's UVB thread
    plan = {
        "device_type": "950",
        "devices": {"0": {"pool": [0], "main": [0]}},
        "host_threads": {"pattern": "uvb_poll_window_thread", "cpus": [1]},
    }
    path = plan_file(plan)
    res = cli("bind", "--plan", path, "--device", "0", "--pid", str(worker.pid))
    assert res.rc == 0, res.out + res.err
    assert "[irq] IRQ binding skipped on Ascend 950." in res.out
    # The kernel keeps 15 bytes of the name: /proc shows "uvb_poll_window".
    assert thread_cpus(worker.pid, worker.tid("uvb_poll_window")) == [1]
    assert thread_cpus(worker.pid, worker.tid("acl_thread")) == [0]  # 950: not separate
    assert thread_cpus(daemon.pid, daemon.tid("uvb_poll_window")) == [1]
    assert thread_cpus(daemon.pid, daemon.tid("idle")) == [0, 1]  # not its business
    ok = cli("verify", "--plan", path, "--device", "0", "--pid", str(worker.pid))
    assert ok.rc == 0, ok.out
    os.sched_setaffinity(daemon.tid("uvb_poll_window"), {0})
    bad = cli("verify", "--plan", path, "--device", "0", "--pid", str(worker.pid))
    assert bad.rc == 1
    assert f"thread {daemon.tid('uvb_poll_window')} (uvb_poll_window) drifted" in bad.out
