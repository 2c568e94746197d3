"""`accelhost bench bind` run for real: the bound arm is bound, the unbound arm is not."""

from __future__ import annotations

import json
import os
import sys

import pytest
from bench_helpers import bench_json, run_bench

SEES_CPUS = "import os; print('cpus=%d' % len(os.sched_getaffinity(0)))"
ALL_CPUS = len(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(ALL_CPUS < 2, reason="binding to 1 CPU changes nothing")


@needs_two_cpus
def test_the_issue_example_bound_runs_see_one_cpu_unbound_runs_see_all():
    res = run_bench(
        "--cpus", "1", "--repeats", "4", "--metric", "cpus=([0-9]+)", "--json",
        "--", "python3", "-c", SEES_CPUS,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["arms"]["bound"]["values"] == [1.0] * 4
    assert data["arms"]["unbound"]["values"] == [float(ALL_CPUS)] * 4
    assert data["ratio"] == pytest.approx(1 / ALL_CPUS)
    assert data["ci"] == [pytest.approx(1 / ALL_CPUS)] * 2
    assert data["verdict"] == "better"  # fewer "cpus" is lower, and lower is better
    assert data["cpus"] == [1]
    assert data["command"] == ["python3", "-c", SEES_CPUS]
    assert data["host"] == os.uname().nodename
    assert data["figure"] == "metric"
    assert data["interrupted"] is False
    counted = [r for r in data["runs"] if not r["warmup"]]
    assert len(counted) == 8 and all(r["status"] == "ok" for r in counted)
    # A progress line per run on standard error (not a terminal here).
    assert res.stderr.count("bench bind: run ") == len(data["runs"])


@needs_two_cpus
def test_the_table_names_the_figure_the_binding_and_the_verdict():
    res = run_bench("--cpus", "1", "--repeats", "2", "--warmup", "0", "--", "true")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "figure: wall time (s); lower is better" in out
    assert "bound: --cpus, as `accelhost exec` binds (no IRQ steps): set affinity to CPUs 1" in out
    assert "0 warm-up round(s) not counted, then 2 rounds" in out
    assert [line.split()[:3] for line in out.splitlines() if line.startswith(("unbound", "bound"))][
        -2:
    ] == [["unbound", "2", "0"], ["bound", "2", "0"]]
    assert "\nverdict: " in out


@needs_two_cpus
def test_a_plan_binds_cpus_and_memory_policy_as_exec_does(plan_file):
    plan = plan_file({"devices": {"0": {"main": [1], "numa_node": 0}}})
    # 2 when bound as exec binds (CPU 1 only, memory preferred on node 0), else 1.
    probe = (
        "import os; p = open('/proc/self/numa_maps').readline().split()[1]; "
        "print('ok=%d' % (1 + (os.sched_getaffinity(0) == {1} and p == 'prefer:0')))"
    )
    data = bench_json(
        "--plan", plan, "--device", "0", "--repeats", "3", "--metric", "ok=([0-9])",
        "--", sys.executable, "-c", probe,
    )  # fmt: skip
    assert data["arms"]["bound"]["values"] == [2.0] * 3
    assert data["arms"]["unbound"]["values"] == [1.0] * 3
    assert data["binding"]["device"] == 0
    assert data["binding"]["steps"] == [
        "set affinity of the new command to CPUs 1 [main]",
        "set the memory policy of the new command to preferred node 0",
    ]


def test_membind_is_strict_as_with_exec(plan_file):
    plan = plan_file({"devices": {"0": {"main": [0], "numa_node": 0}}})
    probe = (
        "p = open('/proc/self/numa_maps').readline().split()[1]; print('b=%d' % (p == 'bind:0'))"
    )
    data = bench_json(
        "--plan", plan, "--device", "0", "--membind", "--repeats", "2", "--warmup", "0",
        "--metric", "b=([0-9])", "--", sys.executable, "-c", probe,
    )  # fmt: skip
    assert data["arms"]["bound"]["values"] == [1.0, 1.0]
    # 0 is no ratio: the unbound figures are there, the verdict cannot be.
    assert data["arms"]["unbound"]["values"] == [0.0, 0.0]
    assert data["verdict"] == "inconclusive"


@needs_two_cpus
def test_failed_runs_are_reported_and_not_counted():
    # Fails (exit 3, a message on stderr) when it sees one CPU: every bound run fails.
    cmd = "import os, sys; n = len(os.sched_getaffinity(0)); print('n=%d' % n)\n"
    cmd += "if n == 1: sys.exit('too few CPUs')"
    res = run_bench(
        "--cpus", "1", "--repeats", "3", "--metric", "n=([0-9]+)", "--json",
        "--", sys.executable, "-c", cmd,
    )  # fmt: skip
    assert res.returncode == 1  # an arm has no figure
    data = json.loads(res.stdout)
    assert data["arms"]["bound"]["runs"] == 0 and data["arms"]["bound"]["failed"] == 3
    assert data["arms"]["unbound"]["runs"] == 3 and data["arms"]["unbound"]["failed"] == 0
    bound = [r for r in data["runs"] if r["arm"] == "bound"]
    assert all(r["status"] == "failed" and r["returncode"] == 1 for r in bound)
    assert all(r["detail"] == "exit status 1: too few CPUs" for r in bound)
    assert data["verdict"] == "inconclusive"
    assert "an arm has no figure" in res.stderr


def test_a_missing_metric_fails_that_run_only(tmp_path):
    # Prints the metric on every run but the third.
    counter = tmp_path / "n"
    cmd = (
        "import sys; p = sys.argv[1]\n"
        "n = len(open(p).read()) if __import__('os').path.exists(p) else 0\n"
        "open(p, 'a').write('x')\n"
        "print('t=1.5' if n != 2 else 'no figure this time')"
    )
    data = bench_json(
        "--cpus", "0", "--repeats", "3", "--warmup", "0", "--metric", "t=([0-9.]+)",
        "--", sys.executable, "-c", cmd, str(counter),
    )  # fmt: skip
    third = data["runs"][2]
    assert third["status"] == "failed"
    assert third["detail"] == "--metric 't=([0-9.]+)' not found in the output"
    assert [r["status"] for r in data["runs"]].count("failed") == 1
    assert data["arms"][third["arm"]]["runs"] == 2


def test_a_command_that_does_not_exist_fails_every_run():
    res = run_bench("--cpus", "0", "--repeats", "2", "--json", "--", "no-such-command-xyz")
    assert res.returncode == 1
    data = json.loads(res.stdout)
    assert {r["detail"] for r in data["runs"]} == {
        "cannot run 'no-such-command-xyz': No such file or directory"
    }
    assert "Traceback" not in res.stderr


def test_cpus_outside_this_process_stop_before_any_run(tmp_path):
    marker = tmp_path / "ran"
    beyond = max(os.sched_getaffinity(0)) + 1
    res = run_bench("--cpus", str(beyond), "--", "touch", str(marker))
    assert res.returncode == 1
    assert f"CPUs {beyond} of the bound arm are not among the CPUs" in res.stderr
    assert not marker.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cpus", "0"], "no command to measure"),
        (["--cpus", "0", "--"], "no command to measure"),
        (["--plan", "p.json", "--", "true"], "--plan needs --device N"),
        (["--device", "0", "--", "true"], "--device needs --plan FILE"),
        (["--plan", "p.json", "--device", "0,1", "--", "true"], "takes one device"),
        (["--cpus", "0", "--plan", "p.json", "--device", "0", "--", "true"], "exclude each other"),
        (["--", "true"], "--cpus LIST or --plan FILE --device N"),
        (["--cpus", "0", "--repeats", "0", "--", "true"], "--repeats must be 1 to 10000"),
        (["--cpus", "0", "--repeats", "10001", "--", "true"], "--repeats must be 1 to 10000"),
        (["--cpus", "0", "--warmup", "-1", "--", "true"], "--warmup must be 0 to 10000"),
        (["--cpus", "0", "--metric", "([0-9]", "--", "true"], "is not a regular expression"),
        (["--cpus", "0", "--metric", "[0-9]+", "--", "true"], "has no group"),
        (["--cpus", "x", "--", "true"], "--cpus"),
        (["--cpus", "0", "--membind", "--", "true"], "go with --plan"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, message):
    res = run_bench(*args)
    assert res.returncode == 2
    assert message in res.stderr
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stdout == ""


@needs_two_cpus
def test_a_binding_step_that_fails_in_the_child_stops_before_a_bound_run(plan_file, tmp_path):
    # Node 5 does not exist here: set_mempolicy(2) refuses it in the forked child.
    plan = plan_file({"devices": {"0": {"main": [1], "numa_node": 5}}})
    seen = tmp_path / "seen"
    cmd = "import os, sys; open(sys.argv[1], 'a').write('%d\\n' % len(os.sched_getaffinity(0)))"
    res = run_bench(
        "--plan", plan, "--device", "0", "--repeats", "3",
        "--", sys.executable, "-c", cmd, str(seen),
    )  # fmt: skip
    assert res.returncode == 1
    assert (
        "accelhost: cannot bind the bound arm: set the memory policy of the new command to "
        "preferred node 5: " in res.stderr
    )
    assert res.stderr.rstrip().endswith("Invalid argument")
    # Only the first (unbound) warm-up run ran; no run ever ran half-bound.
    assert seen.read_text().split() == [str(ALL_CPUS)]
    assert res.stdout == ""


def test_a_run_killed_by_a_signal_says_which():
    cmd = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    data = bench_json("--cpus", "0", "--repeats", "2", "--", sys.executable, "-c", cmd)
    assert {(r["returncode"], r["detail"]) for r in data["runs"]} == {(-9, "killed by SIGKILL")}
    assert data["verdict"] == "inconclusive"
