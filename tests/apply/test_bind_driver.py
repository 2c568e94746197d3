"""The one bind driver: bind, exec, run --bind and bind_current_process give the same
affinities and the same report for the same plan and device; its ARM and retry policies.
Real processes; affinities read back from /proc."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from apply_helpers import thread_cpus

from accelhost.apply import driver
from accelhost.apply.build import BindOptions, build_bind
from accelhost.apply.steps import OK, SKIPPED
from accelhost.plans import Plan

PLAN = {"devices": {"0": {"main": [0], "acl": [1], "release": [1]}}}
BOUND = {"python": [0], "acl_thread": [1], "worker": [0]}
TIMEOUT_S = 120

# Starts two named threads at once, then (argv[1] == "wait") waits until something has
# bound it (main thread on CPU 0 and acl_thread on CPU 1), or (argv[1] == "bind") binds
# itself with bind_current_process; prints its threads' CPUs (and the report) as JSON.
CHILD = textwrap.dedent(
    r"""
    import json, os, sys, threading, time
    stop = threading.Event()
    def named(name, ready):
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
            fh.write(name)
        ready.set()
        stop.wait()
    for name in ("acl_thread", "worker"):
        ready = threading.Event()
        threading.Thread(target=named, args=(name, ready), daemon=True).start()
        ready.wait()
    def cpus():
        return {
            open(f"/proc/self/task/{t}/comm").read().strip(): sorted(os.sched_getaffinity(int(t)))
            for t in os.listdir("/proc/self/task")
        }
    out = {}
    if sys.argv[1] == "bind":
        import accelhost
        out["report"] = accelhost.bind_current_process(json.loads(sys.argv[2]), 0).to_dict()
    elif sys.argv[1] == "wait":
        deadline = time.monotonic() + 100
        while cpus().get("acl_thread") != [1] and time.monotonic() < deadline:
            time.sleep(0.05)
    out["cpus"] = cpus()
    stop.set()
    print(json.dumps(out), flush=True)
    """
)


def child_argv(mode: str, *extra: str) -> list[str]:
    return [sys.executable, "-c", CHILD, mode, *extra]


def accelhost(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def test_bind_exec_run_and_the_worker_bind_alike(spawn, plan_file):
    path = plan_file(PLAN)

    # accelhost bind --pid
    child = spawn("acl_thread", "worker")
    res = accelhost("bind", "--plan", path, "--device", "0", "--pid", str(child.pid), "--json")
    assert res.returncode == 0, res.stderr
    bind_report = json.loads(res.stdout)
    by_bind = {name: thread_cpus(child.pid, tids[0]) for name, tids in child.tids().items()}

    # accelhost.bind_current_process inside the worker
    worker = subprocess.run(
        child_argv("bind", json.dumps(PLAN)), capture_output=True, text=True, timeout=TIMEOUT_S
    )
    assert worker.returncode == 0, worker.stderr
    by_worker = json.loads(worker.stdout)

    # accelhost run --bind 0 --plan FILE: binds the command after the delay
    run = accelhost(
        "run", "--bind", "0", "--plan", path, "--bind-delay", "2", "--", *child_argv("wait")
    )
    assert run.returncode == 0, run.stderr
    by_run = json.loads(run.stdout)["cpus"]

    # accelhost exec: the command starts on main; threads it makes later inherit main
    ex = accelhost("exec", "--plan", path, "--device", "0", "--json", "--", *child_argv("none"))
    assert ex.returncode == 0, ex.stderr
    exec_report = json.loads(ex.stderr)
    by_exec = json.loads(ex.stdout)["cpus"]

    assert by_bind == by_worker["cpus"] == by_run == BOUND
    assert by_exec == {"python": [0], "acl_thread": [0], "worker": [0]}
    # One report type: the same fields, and the same fields per thread step.
    worker_report = by_worker["report"]
    assert set(bind_report) == set(worker_report) == set(exec_report)
    thread_keys = {
        frozenset(s) for r in (bind_report, worker_report) for s in r["steps"]
        if s["kind"] == "thread"
    }  # fmt: skip
    assert len(thread_keys) == 1
    assert [s["role"] for s in bind_report["steps"] if s["kind"] == "thread"] == [
        s["role"] for s in worker_report["steps"] if s["kind"] == "thread"
    ]
    # run --bind logs the same driver's report: 3 thread steps and the memory step.
    assert "--bind: pid " in run.stderr and ": 4 step(s) done, 0 failed" in run.stderr


def test_threads_born_or_gone_while_binding_are_retried_or_skipped(spawn):
    child = spawn("worker", "doomed")
    plan = Plan.from_dict({"devices": {"0": {"main": [1]}}})
    options = BindOptions(pid=child.pid, memory=False, irq=False)
    prepared = build_bind(plan, 0, options)  # lists python, worker, doomed
    child.spawn_thread("late")  # born after the list was made
    doomed = child.tid("doomed")
    child.end_thread("doomed")  # gone before it is pinned
    results = driver.run_steps(prepared, child.pid, None)
    by_tid = {r.step.tid: r for r in results}  # type: ignore[attr-defined]
    late = child.tid("late")
    assert by_tid[late].status == OK and by_tid[late].step.role == "main"
    assert thread_cpus(child.pid, late) == [1]
    assert by_tid[doomed].status == SKIPPED and by_tid[doomed].detail == "the thread has exited"
    assert thread_cpus(child.pid, child.tid("worker")) == [1]


@pytest.mark.parametrize(
    ("family", "machine", "any_arch", "skipped"),
    [
        ("A3", "x86_64", False, True),
        ("A3", "x86_64", True, False),
        ("A3", "aarch64", False, False),
        ("910B", "x86_64", False, False),  # not a family name: not an Ascend plan
        ("nvidia", "x86_64", False, False),
        ("950", "x86_64", False, True),
    ],
)
def test_one_arm_policy(family, machine, any_arch, skipped):
    plan = Plan.from_dict({"device_type": family, **PLAN})
    got = driver.arch_skip(plan, any_arch, machine)
    assert got == (driver.NON_ARM if skipped else None)


def test_run_bind_skips_an_ascend_plan_off_arm_and_says_so(plan_file):
    if os.uname().machine.lower() in driver.ARM_MACHINES:
        pytest.skip("this host is ARM: the policy binds here")
    path = plan_file({"device_type": "A3", **PLAN})
    run = accelhost("run", "--bind", "0", "--plan", path, "--", "sh", "-c", "exit 3")
    assert run.returncode == 3, run.stderr
    assert "--bind: CPU binding skipped: non-ARM CPU detected. (--any-arch binds anyway)" in (
        run.stderr
    )


def test_the_cli_bind_is_the_override_and_binds_ascend_plans_anywhere(spawn, plan_file):
    child = spawn("acl_thread", "worker")
    path = plan_file({"device_type": "A3", **PLAN})
    res = accelhost("bind", "--plan", path, "--device", "0", "--pid", str(child.pid), "--no-irq")
    assert res.returncode == 0, res.stderr
    assert thread_cpus(child.pid, child.tid("acl_thread")) == [1]


def test_run_bind_options_need_bind(plan_file):
    res = accelhost("run", "--plan", plan_file(PLAN), "--", "true")
    assert res.returncode == 2 and "go with --bind DEVICE" in res.stderr
    res = accelhost("run", "--bind", "0,1", "--plan", plan_file(PLAN), "--", "true")
    assert res.returncode == 2 and "--bind takes one device" in res.stderr


def test_run_bind_takes_the_same_role_grammar(plan_file):
    """`run --bind --thread-role acl=^acl_thread:1`: one CPU of the pool (the last of main),
    as in `plan` and `bind`; the child waits until its acl_thread is on CPU 1."""
    path = plan_file({"devices": {"0": {"main": [0, 1]}}})
    run = accelhost(
        "run", "--bind", "0", "--plan", path, "--thread-role", "acl=^acl_thread:1",
        "--bind-delay", "2", "--", *child_argv("wait"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["cpus"] == BOUND
