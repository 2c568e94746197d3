"""Binding a 950 plan whose worker part was skipped: vllm-ascend leaves the worker alone
and still pins the host's UVB poll threads; so do `bind`, `verify` and `exec`. Real
processes with named threads; affinities read back from /proc."""

from __future__ import annotations

import json
import os
from pathlib import Path

from apply_helpers import thread_cpus

from accelhost.planner.ascend import TOPO_SKIP

RECORDED = str(Path(__file__).parents[1] / "hosts" / "950-6cpu-1npu-no-topo.json")
# What `plan --json` writes for such a host, made for this machine's CPUs 0-1.
SKIPPED = {
    "device_type": "950",
    "mode": "cluster",
    "visible": [0],
    "devices": {},
    "worker_skipped": TOPO_SKIP,
    "host_threads": {"pattern": "uvb_poll_window_thread", "cpus": [1]},
}
UVB = "uvb_poll_window"  # what /proc shows of uvb_poll_window_thread (15 bytes)


def test_dry_run_of_the_recorded_host_s_plan_lists_only_host_thread_steps(spawn, cli, tmp_path):
    made = cli("plan", "--snapshot", RECORDED, "--json")
    assert made.rc == 0, made.err
    path = tmp_path / "plan.json"
    path.write_text(made.out)
    worker = spawn("uvb_poll_window_thread", "acl_thread")
    before = {t: thread_cpus(worker.pid, t) for ts in worker.tids().values() for t in ts}
    # --force: the plan is of the recorded host (CPUs 0-5, two nodes), not of this one
    args = ("bind", "--plan", str(path), "--device", "0", "--pid", str(worker.pid), "--force")
    res = cli(*args, "--dry-run", "--json")
    assert res.rc == 2, res.out + res.err  # a plan, partially: the worker is not bound
    report = json.loads(res.out)
    assert report["worker_skipped"] == TOPO_SKIP and report["skipped"] is None
    assert report["warnings"][0] == (
        f"worker CPU binding skipped for device 0: {TOPO_SKIP} Only the host's threads are bound."
    )
    steps = report["steps"]
    assert steps and all(s["kind"] == "thread" and s["role"] == "host" for s in steps)
    assert all(s["cpus"] == [1, 2, 3] for s in steps)
    ours = [s for s in steps if s["pid"] == worker.pid]
    assert [(s["tid"], s["name"]) for s in ours] == [(worker.tid(UVB), UVB)]
    # neither the worker's other threads nor its memory
    assert not any(s["tid"] == worker.tid("acl_thread") for s in steps)
    text = cli(*args, "--dry-run")
    assert text.rc == 2
    assert "to CPUs 1-3 [host]" in text.out and "move pages" not in text.out
    assert f"accelhost: warning: worker CPU binding skipped for device 0: {TOPO_SKIP}" in text.err
    assert {t: thread_cpus(worker.pid, t) for t in before} == before  # a dry run


def test_bind_pins_the_uvb_threads_and_leaves_the_worker(spawn, plan_file, cli):
    worker = spawn("uvb_poll_window_thread", "acl_thread")
    other = spawn("uvb_poll_window_thread")  # another process's UVB thread
    free = sorted(os.sched_getaffinity(0))
    path = plan_file(SKIPPED)
    res = cli("bind", "--plan", path, "--device", "0", "--pid", str(worker.pid))
    assert res.rc == 2, res.out + res.err
    assert "worker CPU binding skipped for device 0" in res.err
    assert thread_cpus(worker.pid, worker.tid(UVB)) == [1]
    assert thread_cpus(other.pid, other.tid(UVB)) == [1]
    assert thread_cpus(worker.pid, worker.tid("acl_thread")) == free
    assert thread_cpus(worker.pid, worker.pid) == free
    ok = cli("verify", "--plan", path, "--device", "0", "--pid", str(worker.pid))
    assert ok.rc == 0, ok.out
    assert f"worker CPU binding skipped for device 0: {TOPO_SKIP}" in ok.out
    os.sched_setaffinity(worker.tid(UVB), {0})
    bad = cli("verify", "--plan", path, "--device", "0", "--pid", str(worker.pid))
    assert bad.rc == 1 and f"thread {worker.tid(UVB)} ({UVB}) drifted" in bad.out


def test_exec_starts_the_command_unbound_and_roles_are_refused(plan_file, cli):
    path = plan_file(SKIPPED)
    res = cli("exec", "--plan", path, "--device", "0", "--dry-run", "--", "true")
    assert res.rc == 1
    assert res.err.strip() == f"accelhost: worker CPU binding skipped for device 0: {TOPO_SKIP}"
    role = cli("bind", "--plan", path, "--device", "0", "--pid", "1", "--thread-role", "x=y:1")
    assert role.rc == 1 and role.err.count("\n") == 1
    assert "device 0 has no CPUs in this plan (worker CPU binding skipped" in role.err
    other = cli("bind", "--plan", path, "--device", "3", "--pid", str(os.getpid()), "--dry-run")
    assert other.rc == 1 and "device 3 is not in the plan (planned devices: none;" in other.err
