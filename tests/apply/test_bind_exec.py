"""exec: the command is bound from its first instruction (read by the command itself)."""

from __future__ import annotations

import subprocess
import sys


def run_exec(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", "exec", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_exec_sets_affinity_before_the_command_starts(plan_file):
    path = plan_file({"devices": {"0": {"main": [1], "acl": [0], "release": [0]}}})
    res = run_exec("--plan", path, "--device", "0", "--", "cat", "/proc/self/status")
    assert res.returncode == 0, res.stderr
    assert "Cpus_allowed_list:\t1\n" in res.stdout
    assert "[ok] set affinity of the new command to CPUs 1" in res.stderr


def test_exec_sets_the_memory_policy_preferred_by_default(plan_file):
    path = plan_file({"devices": {"0": {"main": [0], "numa_node": 0}}})
    res = run_exec("--plan", path, "--device", "0", "--", "cat", "/proc/self/numa_maps")
    assert res.returncode == 0, res.stderr
    policies = {line.split()[1] for line in res.stdout.splitlines()}
    assert policies == {"prefer:0"}


def test_exec_membind_is_strict(plan_file):
    path = plan_file({"devices": {"0": {"main": [0]}}})
    res = run_exec(
        "--plan", path, "--device", "0", "--membind", "--", "cat", "/proc/self/numa_maps"
    )
    assert res.returncode == 0, res.stderr
    assert {line.split()[1] for line in res.stdout.splitlines()} == {"bind:0"}


def test_exec_dry_run_runs_nothing(plan_file, tmp_path):
    marker = tmp_path / "ran"
    path = plan_file({"devices": {"0": {"main": [1]}}})
    res = run_exec("--plan", path, "--device", "0", "--dry-run", "--", "touch", str(marker))
    assert res.returncode == 0, res.stderr
    assert not marker.exists()
    assert f"[planned] exec touch {marker}" in res.stdout
    assert "[planned] set the memory policy of the new command to preferred node 0" in res.stdout


def test_exec_of_a_missing_command_is_one_line(plan_file):
    path = plan_file({"devices": {"0": {"main": [0]}}})
    res = run_exec("--plan", path, "--device", "0", "--", "no-such-command-xyz")
    assert res.returncode == 127
    assert "accelhost: cannot run 'no-such-command-xyz': command not found" in res.stderr
    assert "Traceback" not in res.stderr
