"""The benchmark's answer for people (a table) and machines (JSON), and its progress line."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median
from typing import Any, TextIO

from accelhost import formats
from accelhost.bench.bind_exec import Binding
from accelhost.bench.bind_runner import BOUND, FAILED, OK, UNBOUND, Figure, Outcome, Run
from accelhost.bench.bind_stats import INCONCLUSIVE, MIN_RUNS, ArmStats, Comparison
from accelhost.cpulist import format_cpulist
from accelhost.render import isatty, render_table

ORDER = "interleaved rounds, each running both arms; the first arm alternates (round 1 unbound)"


@dataclass(frozen=True)
class Setup:
    """What was asked: the facts every report repeats so that it stands on its own."""

    argv: tuple[str, ...]
    binding: Binding
    figure: Figure
    repeats: int
    warmup: int
    host: str
    unbound_cpus: tuple[int, ...]  # what the unbound arm inherits from this process


def to_dict(setup: Setup, outcome: Outcome, comparison: Comparison) -> dict[str, Any]:
    metric = setup.figure.metric
    data = {
        "format": formats.BENCH_BIND,
        **comparison.to_dict(),
        "figure": "metric" if metric else "wall_time_s",
        "metric": metric.pattern if metric else None,
        "command": list(setup.argv),
        "cpus": list(setup.binding.cpus),
        "unbound_cpus": list(setup.unbound_cpus),
        "binding": setup.binding.to_dict(),
        "host": setup.host,
        "repeats": setup.repeats,
        "warmup": setup.warmup,
        "order": ORDER,
        "interrupted": outcome.interrupted,
        "stopped_early": outcome.gave_up,
        "runs": [r.to_dict() for r in outcome.runs],
    }
    for arm in (UNBOUND, BOUND):
        data["arms"][arm]["failed"] = _failed(outcome.runs, arm)
    return data


def text(setup: Setup, outcome: Outcome, comparison: Comparison) -> str:
    c = comparison
    good = "higher" if c.higher_is_better else "lower"
    lines = [
        f"command: {shlex.join(setup.argv)}",
        f"host: {setup.host}",
        f"figure: {setup.figure.label}; {good} is better",
        f"bound: {setup.binding.label()}",
        f"unbound: inherits CPUs {format_cpulist(setup.unbound_cpus)} and the default "
        "memory policy",
        f"order: {setup.warmup} warm-up round(s) not counted, then {setup.repeats} rounds; {ORDER}",
        "",
        render_table(
            ("arm", "runs", "failed", "mean", "median", "min", "max", "p90", "spread"),
            [
                _row(arm, s, _failed(outcome.runs, arm))
                for arm, s in ((UNBOUND, c.unbound), (BOUND, c.bound))
            ],
        ),
        "",
    ]
    ratio = "none" if c.ratio is None else _num(c.ratio)
    if c.ci is not None:  # there is an interval only where there is a ratio
        ratio += (
            f" ({c.confidence * 100:g} % interval {_num(c.ci[0])} .. {_num(c.ci[1])}; "
            f"bootstrap, {c.resamples} resamples, seed {c.seed})"
        )
    lines += [f"ratio of medians bound/unbound: {ratio}", f"verdict: {c.verdict} ({c.why})"]
    if bad := [r for r in outcome.runs if r.status != OK]:
        lines += ["", "runs without a figure (not counted):"]
        lines += [f"  run {r.slot.index} {_where(r)}: {r.status}: {r.detail}" for r in bad]
    if outcome.interrupted:
        done = sum(1 for r in outcome.runs if r.status != "interrupted")
        lines += ["", f"interrupted: {done} of the planned runs finished"]
    if outcome.gave_up is not None:
        planned = 2 * (setup.warmup + setup.repeats)
        lines += ["", f"stopped after {len(outcome.runs)} of {planned} runs: {outcome.gave_up}"]
    return "\n".join(lines)


def repeats_warning(repeats: int) -> str | None:
    """Said before the first run: with fewer counted figures per arm than an interval
    needs, the verdict can only be "inconclusive", however long the runs take."""
    if repeats >= MIN_RUNS:
        return None
    return (
        f"--repeats {repeats} is too few for a verdict: an interval needs at least "
        f"{MIN_RUNS} figures per arm, so the verdict will be {INCONCLUSIVE}"
    )


def _row(arm: str, s: ArmStats, failed: int) -> list[Any]:
    spread = None if s.spread is None else f"{s.spread * 100:.1f}%"
    nums = (s.mean, s.median, s.min, s.max, s.p90)
    return [arm, s.runs, failed, *(_num(v) if v is not None else "-" for v in nums), spread or "-"]


def _failed(runs: Sequence[Run], arm: str) -> int:
    return sum(1 for r in runs if r.slot.arm == arm and not r.slot.warmup and r.status == FAILED)


def _where(r: Run) -> str:
    kind = "warm-up round" if r.slot.warmup else "round"
    return f"({r.slot.arm}, {kind} {r.slot.round})"


def _num(v: float) -> str:
    return f"{v:.4g}"


class Progress:
    """One line per run on standard error; on a terminal, one line redrawn in place.

    The benchmark can take minutes (R rounds of a real engine's benchmark): the line says
    where it is and what each arm's median is so far.
    """

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self.total = total
        self.out = out or sys.stderr
        self.tty = isatty(self.out)
        self.values: dict[str, list[float]] = {UNBOUND: [], BOUND: []}
        self.drawn = False

    def __call__(self, run: Run) -> None:
        if run.counted and run.value is not None:
            self.values[run.slot.arm].append(run.value)
        what = f"{run.value:.4g}" if run.value is not None else f"{run.status}: {run.detail}"
        medians = ", ".join(
            f"{arm} median {_num(median(vals))}" for arm, vals in self.values.items() if vals
        )
        line = f"bench bind: run {run.slot.index}/{self.total} {_where(run)} -> {what}" + (
            f" | {medians}" if medians else ""
        )
        if self.tty:
            self.out.write("\r\x1b[K" + line[: _columns(self.out) - 1])
            self.drawn = True
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def done(self) -> None:
        if self.tty and self.drawn:
            self.out.write("\r\x1b[K")
            self.out.flush()


def _columns(out: TextIO) -> int:
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 100
