"""Clobbered affinity: a process already narrowed in a known pathological way is named,
with what to do, before binding and in verify (real processes, pinned for real)."""

from __future__ import annotations

import json
import os

import pytest
from apply_helpers import spawn  # noqa: F401  (fixture)

from accelhost.apply.traps import classify_clobber

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")


def pin_all(pid: int, cpus: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def test_bind_warns_when_omp_proc_bind_put_everything_on_cpu0(spawn, plan_file, cli) -> None:  # noqa: F811
    child = spawn("worker", "helper", env={"OMP_PROC_BIND": "TRUE"})
    pin_all(child.pid, {0})
    plan = plan_file({"devices": {"0": {"main": [1]}}})
    res = cli("bind", "--plan", plan, "--device", "0", "--pid", str(child.pid), "--dry-run")
    assert res.rc == 0
    assert f"every thread of process {child.pid} (3) runs on CPU 0 only" in res.err
    assert "vllm-ascend #11307" in res.err and "Unset OMP_PROC_BIND" in res.err
    data = json.loads(
        cli("bind", "--plan", plan, "--device", "0", "--pid", str(child.pid), "--dry-run",
            "--json").out
    )  # fmt: skip
    assert any("runs on CPU 0 only" in w for w in data["warnings"])
    # verify says it too, before the bind.
    ver = cli("verify", "--plan", plan, "--device", "0", "--pid", str(child.pid))
    assert "runs on CPU 0 only" in ver.out


def test_no_warning_when_the_plan_asks_for_that_cpu(spawn, plan_file, cli) -> None:  # noqa: F811
    child = spawn("worker", env={"OMP_PROC_BIND": "TRUE"})
    pin_all(child.pid, {0})
    plan = plan_file({"devices": {"0": {"main": [0]}}})
    res = cli("bind", "--plan", plan, "--device", "0", "--pid", str(child.pid), "--dry-run")
    assert "only" not in res.err
    # After a real bind to one CPU every thread is on it: verify must not call that a trap.
    plan1 = plan_file({"devices": {"0": {"main": [1]}}})
    cli("bind", "--plan", plan1, "--device", "0", "--pid", str(child.pid), "--no-irq")
    ver = cli("verify", "--plan", plan1, "--device", "0", "--pid", str(child.pid), "--no-irq")
    assert ver.rc == 0 and "runs on CPU" not in ver.out


def test_pinned_without_omp_names_other_causes(spawn, plan_file, cli) -> None:  # noqa: F811
    if any(k in os.environ for k in ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY")):
        pytest.skip("this environment pins OpenMP for every child")
    child = spawn("worker")
    pin_all(child.pid, {1})
    plan = plan_file({"devices": {"0": {"main": [0]}}})
    res = cli("bind", "--plan", plan, "--device", "0", "--pid", str(child.pid), "--dry-run")
    assert "runs on CPU 1 only" in res.err and "taskset, numactl" in res.err


def test_openmp_places_pinning_each_thread() -> None:
    aff = {10: frozenset({0}), 11: frozenset({1}), 12: frozenset({2}), 13: frozenset({0, 1, 2, 3})}
    env = {"GOMP_CPU_AFFINITY": "0 1 2"}
    (w,) = classify_clobber(7, aff, [0, 1, 2, 3], env)
    assert "3 of the 4 threads of process 7 are each pinned to one CPU (0-2)" in w
    assert "VLLM_CPU_OMP_THREADS_BIND=nobind" in w
    # Without an OpenMP variable it is an ordinary role layout (acl, release CPUs): quiet.
    assert classify_clobber(7, aff, [0, 1, 2, 3], {}) == []
    # The plan's own single-CPU roles are never pathological.
    assert classify_clobber(7, aff, [0, 1, 2, 3], env, planned=[0, 1, 2, 3]) == []
    # OMP_PROC_BIND=false does not pin: the cause is named otherwise.
    (w,) = classify_clobber(7, {1: frozenset({0})}, [0, 1], {"OMP_PROC_BIND": "false"})
    assert "OpenMP" not in w and "something pinned it" in w
