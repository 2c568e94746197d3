"""`bench bind` stops after the first rounds when no run can give a figure, says why and
exits 1; it warns up front when --repeats is too few for a verdict."""

from __future__ import annotations

import json
import time

from bench_helpers import run_bench

from accelhost.bench.bind_runner import GIVE_UP_ROUNDS


def test_a_command_that_cannot_start_stops_after_the_first_run(tmp_path):
    missing = str(tmp_path / "no-such-command")
    res = run_bench("--cpus", "0", "--repeats", "50", "--json", "--", missing)
    assert res.returncode == 1, res.stderr
    data = json.loads(res.stdout)
    assert len(data["runs"]) == 1
    why = f"cannot run {missing!r}: No such file or directory: no run can start"
    assert data["stopped_early"] == why
    assert f"accelhost: bench bind: stopped early: {why}" in res.stderr


def test_a_metric_that_never_matches_stops_after_the_first_rounds():
    started = time.monotonic()
    res = run_bench(
        "--cpus", "0", "--repeats", "50", "--warmup", "0", "--metric", "tps=([0-9.]+)",
        "--", "python3", "-c", "import time; time.sleep(0.05); print('nothing')",
    )  # fmt: skip
    assert res.returncode == 1, res.stderr
    assert time.monotonic() - started < 60  # 100 runs would take far longer on this host
    runs = 2 * GIVE_UP_ROUNDS
    assert f"stopped after {runs} of 100 runs: no figure from the first {runs} runs: " in res.stdout
    assert "--metric 'tps=([0-9.]+)' not found in the output" in res.stdout
    assert res.stderr.count("bench bind: run ") == runs


def test_one_failing_round_does_not_stop_a_command_that_then_works(tmp_path):
    """Only rounds with no figure at all stop it: a flaky first run is not a reason."""
    flag = tmp_path / "ran"
    probe = (
        f"import os, sys; p = {str(flag)!r}\n"
        "if not os.path.exists(p): open(p, 'w').close(); sys.exit(3)\n"
        "print('x=1')"
    )
    res = run_bench(
        "--cpus", "0", "--repeats", "3", "--warmup", "0", "--metric", "x=([0-9])", "--json",
        "--", "python3", "-c", probe,
    )  # fmt: skip
    data = json.loads(res.stdout)
    assert data["stopped_early"] is None and len(data["runs"]) == 6
    assert [r["status"] for r in data["runs"]].count("failed") == 1


def test_rounds_are_numbered_from_1_after_the_warmups():
    res = run_bench("--cpus", "0", "--repeats", "2", "--warmup", "1", "--json", "--", "true")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)["runs"]
    assert [(r["round"], r["warmup"]) for r in runs] == [
        (1, True), (1, True), (1, False), (1, False), (2, False), (2, False),
    ]  # fmt: skip
    assert "run 3/6 (unbound, round 1)" in res.stderr
    assert "run 1/6 (unbound, warm-up round 1)" in res.stderr


def test_too_few_repeats_for_a_verdict_is_said_before_the_runs():
    res = run_bench("--cpus", "0", "--repeats", "1", "--warmup", "0", "--", "true")
    assert res.returncode == 0, res.stderr
    first = res.stderr.splitlines()[0]
    assert first == (
        "accelhost: warning: --repeats 1 is too few for a verdict: an interval needs at "
        "least 2 figures per arm, so the verdict will be inconclusive"
    )
    assert "verdict: inconclusive" in res.stdout
    ok = run_bench("--cpus", "0", "--repeats", "2", "--warmup", "0", "--", "true")
    assert "too few" not in ok.stderr
