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


# ---- help and tables at COLUMNS=80 (issue 26, point 7) ---------------------------------

EXAMPLES = sorted(
    f"example:{p.stem}"
    for p in (
        __import__("pathlib").Path(__file__).resolve().parents[1] / "src/accelhost/data/examples"
    ).glob("*.json")
)


def _every_command() -> list[list[str]]:
    from accelhost.cli.main import COMMANDS

    return [[], *([c] for c in COMMANDS), ["bench", "pipeline"], ["bench", "bind"]]


@pytest.mark.parametrize("words", _every_command(), ids=lambda w: " ".join(w) or "accelhost")
def test_every_help_fits_80_columns(words: list[str]) -> None:
    res = _accelhost(*words, "--help", columns="80")
    assert res.returncode == 0, res.stderr
    wide = [line for line in res.stdout.splitlines() if len(line) > 80]
    assert not wide, wide


@pytest.mark.parametrize("command", ["topo", "plan"])
def test_every_table_of_every_bundled_host_fits_80_columns(command: str) -> None:
    for example in EXAMPLES:
        res = _accelhost(command, "--snapshot", example, columns="80")
        wide = [line for line in res.stdout.splitlines() if len(line) > 80]
        assert not wide, (example, wide)
        if res.returncode == 0:  # wrapping moves a list's pieces, it loses none
            whole = _accelhost(command, "--snapshot", example)
            assert _characters(res.stdout) == _characters(whole.stdout), example


def _characters(text: str) -> list[str]:
    """Every printed character but blanks and the tables' dashed rules, in order."""
    kept = (line for line in text.splitlines() if line.strip(" -"))
    return sorted("".join("".join(kept).split()))


def test_a_table_keeps_lists_whole_in_a_pipe_and_wraps_them_at_a_comma() -> None:
    cpus = ",".join(map(str, range(0, 48, 2)))
    rows = [[0, 24, cpus, cpus]]
    assert render_table(["node", "cpus", "range", "allowed"], rows).splitlines()[2].endswith(cpus)
    fitted = render_table(["node", "cpus", "range", "allowed"], rows, columns=60).splitlines()
    assert max(map(len, fitted)) <= 60 and len(fitted) > 3
    assert all(line.split()[-1].endswith((",", "46")) for line in fitted[2:])


def test_each_bind_command_speaks_its_own_verbs() -> None:
    verify = _accelhost("verify", "--help", columns="200").stdout
    assert "apply" not in verify.split("options:")[1]  # verify checks, it applies nothing
    assert "--force               check against a --plan made for another host" in verify
    assert "do not check them" in verify and "do not move" not in verify
    for command in ("bind", "exec"):
        text = _accelhost(command, "--help", columns="200").stdout
        assert "do not move them" in text and "do not check" not in text
    assert "verify:" not in _accelhost("bind", "--help", columns="200").stdout


def test_bench_and_doctor_describe_themselves_whole() -> None:
    bench = _accelhost("bench", "--help", columns="200").stdout
    assert "`bench pipeline` runs one workload" in bench
    from accelhost.hygiene.report import CHECK_NAMES

    doctor = _accelhost("doctor", "--help", columns="200").stdout.split("options:")[0]
    assert "container_init" in doctor and len(CHECK_NAMES) == 9
