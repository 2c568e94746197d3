"""Output fits the terminal (issue 18, point 7): the doctor's table and clean's lines wrap
to $COLUMNS (or the terminal's width); a pipe keeps whole lines; --json never changes;
FAIL and WARN are coloured only on a terminal, and never under NO_COLOR."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest

from accelhost.cli.common import colour_wanted, fit, terminal_columns
from accelhost.render import colour_status, render_table

ORPHANED = "example:vllm-cpu-orphaned-engine"  # long evidence: orphans, leaked files


def _accelhost(*args: str, columns: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "accelhost", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("command", ["doctor", "clean"])
def test_columns_100_fits_100_columns(command: str) -> None:
    wide = _accelhost(command, "--snapshot", ORPHANED)
    fitted = _accelhost(command, "--snapshot", ORPHANED, columns="100")
    assert fitted.returncode == wide.returncode
    assert _widest(wide.stdout) > 100  # a pipe without COLUMNS: whole lines, as before
    assert _widest(fitted.stdout) <= 100
    if command == "clean":  # wrapping moves words, it loses none
        assert fitted.stdout.split() == wide.stdout.split()
    assert "\x1b[" not in fitted.stdout + wide.stdout  # not a terminal: no colour


def test_doctor_table_wraps_evidence_and_keeps_every_check() -> None:
    fitted = _accelhost("doctor", "--snapshot", ORPHANED, columns="100")
    data = json.loads(_accelhost("doctor", "--snapshot", ORPHANED, "--json").stdout)
    rows = [line.split()[:2] for line in fitted.stdout.splitlines()[2:] if line[:1] != " "]
    assert rows == [[c["name"], c["status"]] for c in data["checks"]]


def test_json_is_the_same_whatever_the_width() -> None:
    plain = _accelhost("doctor", "--snapshot", ORPHANED, "--json")
    narrow = _accelhost("doctor", "--snapshot", ORPHANED, "--json", columns="40")
    assert plain.stdout == narrow.stdout and plain.stdout.startswith("{")


def test_fit_indents_continuations_and_never_cuts_a_path() -> None:
    path = "/dev/shm/" + "x" * 50
    lines = fit(f"  2. remove {path} (4.0 KiB used, root): held by no process", 40)
    assert lines[0] == "  2. remove"
    assert lines[1] == f"       {path}"
    assert all(line.startswith("       ") for line in lines[1:])
    assert fit("short", None) == ["short"] and fit("short", 3) == ["short"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_under_no_color(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colour_wanted(_Tty()) and not colour_wanted(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_wanted(_Tty())


def test_columns_come_from_the_environment_then_the_terminal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert terminal_columns(io.StringIO()) == 100
    monkeypatch.delenv("COLUMNS")
    assert terminal_columns(io.StringIO()) is None  # a pipe: no limit


def test_painted_cells_keep_the_columns_aligned() -> None:
    rows = [["orphan_engines", "FAIL", "x"], ["hugepages", "OK", "y"], ["posix_shm", "WARN", "z"]]
    plain = render_table(["CHECK", "STATUS", "E"], rows)
    painted = render_table(
        ["CHECK", "STATUS", "E"], rows, lambda i, c: colour_status(c) if i == 1 else c
    )
    assert "\x1b[1;31mFAIL\x1b[0m" in painted and "\x1b[33mWARN\x1b[0m" in painted
    assert "\x1b" not in painted.splitlines()[3].split("OK")[0]  # OK stays plain
    stripped = painted.replace("\x1b[1;31m", "").replace("\x1b[33m", "").replace("\x1b[0m", "")
    assert stripped == plain
