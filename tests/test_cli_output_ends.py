"""What a command leaves for the next one (issue 26, points 4 and 8): `--json` always prints
a JSON document, the error included, so `plan --json > plan.json` never leaves an empty
file; a plan file that is no plan is named for what it is; and a reader that goes away
(`doctor | head`) ends the output, never the command's exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CPU_ONLY = "example:vllm-cpu-orphaned-engine"  # a recorded host without an accelerator


def _accelhost(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """Run accelhost with its standard output a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` that exited before the first byte
    try:
        return subprocess.run(
            [sys.executable, "-m", "accelhost", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)


def test_plan_json_that_cannot_plan_prints_the_error_as_its_document(tmp_path: Path) -> None:
    res = _accelhost("plan", "--snapshot", CPU_ONLY, "--json")
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    assert doc == {
        "format": "accelhost-plan/1",
        "exit_code": 1,
        "reason": doc["reason"],
    }
    assert doc["reason"].startswith("no accelerator found on the recorded host")
    assert res.stderr == f"accelhost: cannot plan: {doc['reason']}\n"  # people: one line
    # the next step of the walkthrough says what happened, not "not valid JSON"
    plan_json = tmp_path / "plan.json"
    plan_json.write_text(res.stdout)
    bound = _accelhost("bind", "--plan", str(plan_json), "--device", "0", "--pid", "1")
    assert bound.returncode == 2
    assert bound.stderr == (
        f"accelhost bind: {plan_json}: `accelhost plan` failed when it wrote this file "
        f"(exit 1): {doc['reason']}\n"
    )


@pytest.mark.parametrize(
    ("argv", "document", "status"),
    [
        (["topo", "--snapshot", "/nonexistent/host.json", "--json"], "accelhost-topo/1", 2),
        (["doctor", "--snapshot", "/nonexistent/host.json", "--json"], "accelhost-doctor/1", 2),
        (["plan", "--json", "--device", "x"], "accelhost-plan/1", 2),  # argparse's refusal
        (["verify", "--json"], "accelhost-verify/1", 2),
    ],
)
def test_every_json_command_prints_its_failure_as_json(
    argv: list[str], document: str, status: int
) -> None:
    res = _accelhost(*argv)
    assert res.returncode == status, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["format"], doc["exit_code"]) == (document, status)
    assert doc["reason"] and doc["reason"] in res.stderr


def test_without_json_a_failure_prints_nothing_on_standard_output() -> None:
    res = _accelhost("plan", "--snapshot", CPU_ONLY)
    assert res.returncode == 1 and res.stdout == ""


@pytest.mark.parametrize("command", ["bind", "exec", "verify"])
def test_an_empty_plan_file_asks_whether_plan_failed(command: str, tmp_path: Path) -> None:
    empty = tmp_path / "plan.json"
    empty.write_text("")
    argv = [command, "--plan", str(empty), "--device", "0"]
    argv += ["--pid", "1"] if command != "exec" else ["--", "true"]
    res = _accelhost(*argv)
    assert res.returncode == 2
    assert res.stderr == f"accelhost {command}: {empty}: empty file: did `accelhost plan` fail?\n"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON"),
        ('{"format": "accelhost-plan/7", "devices": {"0": {"main": [0]}}}', "unsupported format"),
        ("[]", "a plan is a JSON object"),
    ],
)
def test_a_plan_file_that_is_no_plan_is_one_answer_in_bind_and_exec(
    content: str, problem: str, tmp_path: Path
) -> None:
    """Unreadable, not JSON and not a plan were exit 2 `accelhost bind: ...` for some and
    exit 1 `accelhost: cannot plan: ...` for others: now one status and one prefix."""
    path = tmp_path / "plan.json"
    path.write_text(content)
    for command, tail in (("bind", ["--pid", "1"]), ("exec", ["--", "true"])):
        res = _accelhost(command, "--plan", str(path), "--device", "0", *tail)
        assert res.returncode == 2, (command, res.stderr)
        assert res.stderr.startswith(f"accelhost {command}: {path}: ")
        assert problem in res.stderr and res.stderr.count("\n") == 1


def test_a_closed_pipe_keeps_the_doctors_verdict() -> None:
    verdict = _accelhost("doctor", "--snapshot", CPU_ONLY)
    assert verdict.returncode == 1  # FAIL: orphan engines on this recording
    piped = _into_closed_pipe("doctor", "--snapshot", CPU_ONLY)
    assert piped.returncode == 1
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["plan", "--snapshot", "example:a3-640cpu-16npu", "--json"], 0),
        (["plan", "--snapshot", CPU_ONLY, "--json"], 1),
        (["--help"], 0),
    ],
)
def test_a_closed_pipe_ends_the_output_not_the_status(argv: list[str], status: int) -> None:
    piped = _into_closed_pipe(*argv)
    assert piped.returncode == status, piped.stderr
    assert "Traceback" not in piped.stderr


def test_a_pipe_closed_after_the_first_lines_keeps_the_verdict() -> None:
    """`accelhost doctor | head -1` in a shell, with the pipeline's status taken from the
    doctor (`set -o pipefail`)."""
    script = (
        f"set -o pipefail; {sys.executable} -m accelhost doctor --snapshot {CPU_ONLY} "
        "| head -1 >/dev/null"
    )
    res = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert res.returncode == 1, res.stderr
