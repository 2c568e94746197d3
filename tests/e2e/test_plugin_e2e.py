"""The vLLM plugin on the real engine: installed with accelhost, found by vLLM itself.

`plugin_bound` runs with ACCELHOST_PLAN naming a plan whose device 0 is the last CPU, and
with vLLM's own OpenMP binding told to use the first (VLLM_CPU_OMP_THREADS_BIND): every
worker thread can only be on the plan's CPU if the plugin moved it there after warm-up.
`healthy` (the suite's script-launched server) runs without ACCELHOST_PLAN: the plugin is
loaded and does nothing. `plugin_bad_plan` names a CPU this host lacks: it still serves and
says why it did not bind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from engine import Server
from hostcli import accelhost
from plugin_plans import cpus, plan_path

PLUGIN_LINE = "accelhost: "


def thread_cpus(pid: int) -> dict[int, set[int]]:
    """Every live thread of `pid` and the CPUs it may run on."""
    out: dict[int, set[int]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = os.sched_getaffinity(int(tid))
        except OSError:  # the thread ended meanwhile
            continue
    assert out, f"no thread of {pid} could be read"
    return out


def plugin_lines(server: Server) -> list[str]:
    return [ln for ln in server.log_text().splitlines() if PLUGIN_LINE in ln]


def vllm_core_ids(server: Server) -> set[int]:
    """The CPUs vLLM's own OpenMP binding gave the worker (its start-up log says)."""
    found = re.findall(r"local_rank=0, core ids=\[([0-9, ]+)\]", server.log_text())
    assert len(found) == 1, f"{server.name}: no OpenMP binding info\n{server.log_tail()}"
    return {int(c) for c in found[0].split(",")}


def needs_two_cpus() -> tuple[int, int]:
    vllm_cpu, plan_cpu = cpus()
    if vllm_cpu == plan_cpu:
        pytest.skip("needs 2 CPUs: vLLM's own binding on one, the plan's device on another")
    return vllm_cpu, plan_cpu


@pytest.mark.servers("plugin_bound")
def test_plugin_binds_every_thread_of_the_real_worker(server_pool) -> None:
    vllm_cpu, plan_cpu = needs_two_cpus()
    server = server_pool.get("plugin_bound")
    worker = server.pid_of("VLLM::Worker")
    # vLLM bound its OpenMP threads to the other CPU during start-up, before warm-up.
    assert vllm_core_ids(server) == {vllm_cpu}
    before = thread_cpus(worker)
    assert all(cpus == {plan_cpu} for cpus in before.values()), before

    lines = plugin_lines(server)
    assert len(lines) == 1, server.log_tail()
    (line,) = lines
    assert f"(Worker pid={worker})" in line and "INFO" in line, line
    assert f"bound worker {worker} to device 0" in line and "after warm-up" in line, line
    assert f"threads on CPUs {plan_cpu}" in line and "failed" not in line, line

    # accelhost's own check agrees: every thread matches the plan (exit 0).
    plan = plan_path(server.log.parent, "plugin_bound")
    assert json.loads(plan.read_text())["devices"]["0"]["main"] == [plan_cpu]
    verify = accelhost(
        "verify",
        "--plan",
        str(plan),
        "--device",
        "0",
        "--pid",
        str(worker),
        "--no-irq",
    )
    assert verify.rc == 0, verify.explain()
    assert re.search(r"^match: \d+ threads and 0 IRQs checked, 0 drifted$", verify.stdout, re.M), (
        verify.explain()
    )
    # Kept beside the server's log: the proof docs/e2e.md shows.
    proof = [f"$ accelhost verify --plan {plan} --device 0 --pid {worker} --no-irq"]
    proof += verify.stdout.splitlines()
    for tid in sorted(before):  # the kernel's view, as a user checks it by hand
        taskset = subprocess.run(["taskset", "-pc", str(tid)], capture_output=True, text=True)
        proof += [f"$ taskset -pc {tid}", (taskset.stdout or taskset.stderr).strip()]
    server.log.with_name("plugin_bound.proof.txt").write_text("\n".join(proof) + "\n")

    assert server.answers()
    # Threads the worker started while serving inherit the bound CPU.
    after = thread_cpus(worker)
    assert all(cpus == {plan_cpu} for cpus in after.values()), after


@pytest.mark.servers("healthy")
def test_without_accelhost_plan_the_plugin_does_nothing(server_pool) -> None:
    _, plan_cpu = needs_two_cpus()
    server = server_pool.get("healthy")  # started without ACCELHOST_PLAN
    assert "ACCELHOST_PLAN" not in os.environ
    worker = server.pid_of("VLLM::Worker")
    assert not plugin_lines(server), plugin_lines(server)
    # vLLM's own binding stands: its OpenMP threads stay on the CPUs it chose.
    own = vllm_core_ids(server)
    placed = thread_cpus(worker)
    assert any(c == own for c in placed.values()), (own, placed)
    assert not all(c == {plan_cpu} for c in placed.values()), placed
    assert server.answers()


@pytest.mark.servers("plugin_bad_plan")
def test_a_bind_that_fails_never_stops_the_engine(server_pool) -> None:
    needs_two_cpus()
    server = server_pool.get("plugin_bad_plan")
    worker = server.pid_of("VLLM::Worker")
    plan = json.loads(plan_path(server.log.parent, "plugin_bad_plan").read_text())
    (absent,) = plan["devices"]["0"]["main"]
    assert absent not in os.sched_getaffinity(0)

    lines = plugin_lines(server)
    not_bound = [ln for ln in lines if f"worker {worker} not bound to device 0" in ln]
    assert len(not_bound) == 1, server.log_tail()
    assert "WARNING" in not_bound[0] and f"CPUs {absent}:" in not_bound[0], not_bound[0]
    assert "none of these CPUs is allowed" in not_bound[0], not_bound[0]
    # One step per thread failed: the log has the first failure and the count, not dozens.
    assert server.log_text().count("step failed: ") == 1, server.log_tail()
    # Nothing moved: vLLM's own binding stands, and the server serves.
    own = vllm_core_ids(server)
    assert any(c == own for c in thread_cpus(worker).values())
    assert server.answers()
