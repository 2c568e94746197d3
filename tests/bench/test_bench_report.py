"""The report for people and the progress line (plain lines, or one line on a terminal)."""

from __future__ import annotations

import io
import re

from accelhost.bench.bind_exec import from_cpus
from accelhost.bench.bind_report import Progress, Setup, text, to_dict
from accelhost.bench.bind_runner import (
    BOUND,
    FAILED,
    INTERRUPTED,
    OK,
    UNBOUND,
    Figure,
    Outcome,
    Run,
    schedule,
)
from accelhost.bench.bind_stats import compare


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _runs() -> tuple[Run, ...]:
    s = schedule(2, 0)  # unbound, bound, bound, unbound
    return (
        Run(s[0], OK, 2.0, 0.1, 0),
        Run(s[1], OK, 1.0, 0.1, 0),
        Run(s[2], FAILED, None, 0.1, 3, "exit status 3: boom"),
        Run(s[3], INTERRUPTED, None, 0.05, None, "stopped by SIGINT"),
    )


def _setup() -> Setup:
    return Setup(("cmd", "a b"), from_cpus([0]), Figure(re.compile(r"t=(\d+)")), 2, 0, "h", (0,))


def test_text_lists_failed_and_interrupted_runs_and_the_verdict():
    outcome = Outcome(_runs(), 2)
    out = text(_setup(), outcome, compare(outcome.values(UNBOUND), outcome.values(BOUND)))
    assert "command: cmd 'a b'" in out
    assert "run 3 (bound, round 2): failed: exit status 3: boom" in out
    assert "run 4 (unbound, round 2): interrupted: stopped by SIGINT" in out
    assert "interrupted: 3 of the planned runs finished" in out
    assert "verdict: inconclusive" in out
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines() if "  " in line}
    assert rows[UNBOUND] == ["1", "0"] and rows[BOUND] == ["1", "1"]  # interrupted: not failed


def test_json_has_the_issue_fields_and_every_run():
    outcome = Outcome(_runs(), 2)
    data = to_dict(_setup(), outcome, compare(outcome.values(UNBOUND), outcome.values(BOUND)))
    assert data["arms"]["unbound"]["values"] == [2.0]
    assert data["arms"]["bound"]["values"] == [1.0]
    assert data["arms"]["bound"]["failed"] == 1
    assert {"ratio", "ci", "verdict", "command", "cpus", "host"} <= set(data)
    assert data["command"] == ["cmd", "a b"] and data["cpus"] == [0] and data["host"] == "h"
    assert data["figure"] == "metric" and data["metric"] == r"t=(\d+)"
    assert data["interrupted"] is True
    assert [r["status"] for r in data["runs"]] == [OK, OK, FAILED, INTERRUPTED]


def test_progress_writes_one_line_per_run_when_not_a_terminal():
    out = io.StringIO()
    progress = Progress(4, out)
    for run in _runs()[:3]:
        progress(run)
    progress.done()
    lines = out.getvalue().splitlines()
    assert lines == [
        "bench bind: run 1/4 (unbound, round 1) -> 2 | unbound median 2",
        "bench bind: run 2/4 (bound, round 1) -> 1 | unbound median 2, bound median 1",
        "bench bind: run 3/4 (bound, round 2) -> failed: exit status 3: boom"
        " | unbound median 2, bound median 1",
    ]


def test_progress_redraws_one_line_on_a_terminal_and_erases_it_at_the_end():
    out = Terminal()
    progress = Progress(4, out)
    for run in _runs()[:2]:
        progress(run)
    progress.done()
    value = out.getvalue()
    assert "\n" not in value
    assert value.count("\r\x1b[K") == 3  # two redraws and the final erase
    assert value.endswith("\r\x1b[K")
