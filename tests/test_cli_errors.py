"""Usage errors read as one clear line, numbers are checked, options do what they say
(issue 18, point 8): every case here was seen wrong on main."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accelhost.cli.main import main

A2 = "example:a2-192cpu-8npu-sees-npu0"


def _status(argv: list[str]) -> int:
    """main's exit status, argparse's own errors (SystemExit) included."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["watch", "--rounds", "0"],
        ["watch", "--rounds", "-1"],
        ["watch", "--clean-leaked-bytes", "-5"],
        ["watch", "--clean-orphan-rounds", "0"],
        ["clean", "--grace", "-1"],
        ["bench", "bind", "--grace", "nan", "--cpus", "0", "--", "true"],
        ["run", "--kill-wait", "-2", "--", "true"],
    ],
)
def test_numbers_out_of_bounds_are_refused_with_status_2(argv: list[str]) -> None:
    # A process with a time limit: accepted, `watch --rounds 0` would watch forever.
    res = subprocess.run(
        [sys.executable, "-m", "accelhost", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    flag = next(a for a in argv if a.startswith("--") and a != "--")
    assert lines[0].startswith(f"accelhost {argv[0]}") and f"argument {flag}: " in lines[0]


def test_argparse_errors_are_one_line_with_a_pointer_to_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _status(["bind", "--pid", "x"]) == 2
    line = _one_line(capsys)
    assert line.startswith("accelhost bind: error: argument --pid: invalid int value: 'x'")
    assert line.endswith("; see accelhost bind --help")
    assert _status(["bench", "bind", "--nosuch"]) == 2
    assert _one_line(capsys).startswith("accelhost bench bind: error: unrecognized arguments")


def test_exec_errors_name_the_command_not_its_arguments(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _status(["exec"]) == 2
    assert _one_line(capsys).startswith("accelhost exec: no command to run")
    assert _status(["exec", "--", "true"]) == 2
    assert _one_line(capsys).startswith("accelhost exec: give --device N")


def test_run_bind_errors_say_run_once(capsys: pytest.CaptureFixture[str]) -> None:
    assert _status(["run", "--bind", "0,1", "--", "true"]) == 2
    assert _one_line(capsys) == "accelhost run: --bind takes one device, got '0,1'"
    assert _status(["run", "--keep-shm", "--private-ipc", "--", "true"]) == 2
    assert _one_line(capsys).startswith("accelhost run: --keep-shm and --private-ipc")


def test_a_bad_device_list_is_called_a_device_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert _status(["plan", "--snapshot", A2, "--device", "0-"]) == 2
    line = _one_line(capsys)
    assert "not a device list: '0-'" in line and "CPU" not in line


def test_doctor_brief_json_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    status = _status(["doctor", "--snapshot", A2, "--brief", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == status
    assert data["brief"].split()[0] == data["status"]
    assert "checks" in data


def test_clean_journal_in_a_missing_directory_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "missing" / "deeper" / "j.jsonl"
    assert _status(["clean", "--yes", "--journal", str(journal)]) == 2
    assert _one_line(capsys) == (
        f"accelhost clean: --journal {journal}: there is no directory {journal.parent}"
    )
    assert not (tmp_path / "missing").exists()
