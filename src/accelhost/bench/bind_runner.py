"""Run the command in both arms, interleaved, and read one figure from each run.

The imperative shell of the benchmark. The order is decided up front (`schedule`, pure) so
a test can check it and the report can show it; each run is a fresh child in its own
session, so Ctrl-C (SIGINT to this process) can stop it and everything it started.
Children are started with a preexec_fn (see `_one`): the process running this must have
no other threads, which the CLI has not.
"""

from __future__ import annotations

import functools
import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

# Imported here, in the parent: the bound child runs them between fork and exec, where
# importing (taking the import lock, reading files) is best avoided.
import accelhost.apply.execute  # noqa: F401
import accelhost.apply.memory  # noqa: F401
from accelhost.bench.bind_exec import Binding, apply_in_child
from accelhost.remove.signals import signal_group, signal_name

UNBOUND = "unbound"
BOUND = "bound"
OK = "ok"
FAILED = "failed"
INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Slot:
    """One run in the order: which arm, in which round, and whether it is a warm-up."""

    index: int  # 1-based position in the whole order
    arm: str
    round: int  # 1-based; warm-up rounds come first
    warmup: bool


def schedule(repeats: int, warmup: int) -> list[Slot]:
    """`warmup` rounds then `repeats` rounds, each running both arms. Warm-up rounds and
    counted rounds are numbered from 1 each (a report's "round 1" is the first counted
    one); the first arm alternates (unbound first in round 1, bound first in round 2,
    ...), among the warm-ups the same way.

    Alternating keeps "ran second, after the other arm warmed a cache" from landing on
    one arm only; over an even number of counted rounds each arm goes first equally often.
    """
    if repeats < 1 or warmup < 0:
        raise ValueError("repeats must be at least 1 and warmup at least 0")
    slots: list[Slot] = []
    for count, warm in ((warmup, True), (repeats, False)):
        for r in range(count):
            arms = (UNBOUND, BOUND) if r % 2 == 0 else (BOUND, UNBOUND)
            for arm in arms:
                slots.append(Slot(len(slots) + 1, arm, r + 1, warm))
    return slots


# Both arms, each first once: with no figure from these, the rest would fail the same way.
GIVE_UP_ROUNDS = 2


def give_up(runs: Sequence[Run]) -> str | None:
    """Why no further run is worth making, or None: the command cannot start (the same
    argv in both arms), or the first GIVE_UP_ROUNDS rounds gave no figure at all."""
    if not runs or any(r.status == OK for r in runs):
        return None
    last = runs[-1]
    if last.status == FAILED and last.returncode is None and last.detail.startswith("cannot run"):
        return f"{last.detail}: no run can start"
    if len(runs) >= 2 * GIVE_UP_ROUNDS:
        whys = list(dict.fromkeys(r.detail for r in runs))
        more = f" (and {len(whys) - 2} other reasons)" if len(whys) > 2 else ""
        return f"no figure from the first {len(runs)} runs: {'; '.join(whys[:2])}{more}"
    return None


class FigureError(Exception):
    """The run finished but gave no figure (metric absent or not a number)."""


@dataclass(frozen=True)
class Figure:
    """Where a run's figure comes from: its wall time, or the first group of a regex."""

    metric: re.Pattern[str] | None = None

    @property
    def label(self) -> str:
        if self.metric is None:
            return "wall time (s)"
        return f"first group of --metric {self.metric.pattern!r} in the command's output"

    def read(self, stdout: str, seconds: float) -> float:
        if self.metric is None:
            return seconds
        match = self.metric.search(stdout)
        if match is None:
            raise FigureError(f"--metric {self.metric.pattern!r} not found in the output")
        text = match.group(1)
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise FigureError(f"--metric matched {text!r}, not a number") from None
        if not math.isfinite(value):
            raise FigureError(f"--metric matched {text!r}, not a finite number")
        return value


@dataclass(frozen=True)
class Run:
    """What one run gave: a figure, or why not."""

    slot: Slot
    status: str  # ok, failed, interrupted
    value: float | None
    seconds: float
    returncode: int | None
    detail: str = ""

    @property
    def counted(self) -> bool:
        return self.status == OK and not self.slot.warmup

    def to_dict(self) -> dict[str, Any]:
        rest = asdict(self)
        return {**rest.pop("slot"), **rest, "seconds": round(self.seconds, 6)}


@dataclass(frozen=True)
class Outcome:
    runs: tuple[Run, ...]
    stopped_by: int | None = None  # the signal that stopped the benchmark early
    gave_up: str | None = None  # why the benchmark stopped before the planned runs

    @property
    def interrupted(self) -> bool:
        return self.stopped_by is not None

    def values(self, arm: str) -> list[float]:
        return [
            r.value for r in self.runs if r.counted and r.slot.arm == arm and r.value is not None
        ]


class BindingError(Exception):
    """A bound run could not be bound: every later one would fail the same way."""


class Stopped(Exception):
    """SIGTERM arrived: stop as for Ctrl-C (the child is in its own session and would
    otherwise outlive the benchmark)."""


def _raise_stopped(signum: int, frame: object) -> None:
    raise Stopped


def run_all(
    argv: Sequence[str],
    binding: Binding,
    figure: Figure,
    slots: Sequence[Slot],
    *,
    grace: float,
    on_run: Callable[[Run], None] | None = None,
) -> Outcome:
    """Every slot in order; SIGINT or SIGTERM stops at once with the runs finished so far,
    and so does a command that gives no figure (`give_up`).

    The run that was going (its child terminated, and all in its process group) is kept
    as `interrupted`, not counted.
    """
    runs: list[Run] = []
    current: list[subprocess.Popen[bytes]] = []  # the running child, for the interrupt
    slot = slots[0] if slots else None
    started = time.perf_counter()
    previous = _handle(signal.SIGTERM, _raise_stopped)
    try:
        for slot in slots:
            started = time.perf_counter()
            run = _one(argv, binding, figure, slot, current)
            runs.append(run)
            if on_run is not None:
                on_run(run)
            if (why := give_up(runs)) is not None:
                return Outcome(tuple(runs), gave_up=why)
    except (KeyboardInterrupt, Stopped) as exc:
        signum = int(signal.SIGTERM if isinstance(exc, Stopped) else signal.SIGINT)
        for proc in current:
            _stop(proc, grace)
        if slot is not None and (not runs or runs[-1].slot != slot):
            gone = time.perf_counter() - started
            why = f"stopped by {signal.Signals(signum).name}"
            runs.append(Run(slot, INTERRUPTED, None, gone, None, why))
        return Outcome(tuple(runs), signum)
    finally:
        for proc in current:  # an error other than a stop signal: leave no child behind
            if proc.poll() is None:
                _stop(proc, grace)
        if previous is not None:
            _handle(signal.SIGTERM, previous)
    return Outcome(tuple(runs))


def _handle(signum: int, handler: Any) -> Any:
    """Install a handler where Python allows it (the main thread); the old one, or None."""
    try:
        return signal.signal(signum, handler)
    except ValueError:
        return None


def _one(
    argv: Sequence[str],
    binding: Binding,
    figure: Figure,
    slot: Slot,
    current: list[subprocess.Popen[bytes]],
) -> Run:
    # Both arms start the same way (fork, a Python call in the child, exec; the unbound
    # arm's call applies no step): without a preexec_fn subprocess would use vfork, and the
    # unbound arm would start ~3 ms faster for reasons that have nothing to do with binding.
    steps = binding.steps if slot.arm == BOUND else ()
    fds = list(os.pipe())  # [read, write]: the child's word on a failed binding step
    preexec = functools.partial(apply_in_child, steps, fds[1])
    start = time.perf_counter()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: Ctrl-C stops all it started
            preexec_fn=preexec,
        )
    except subprocess.SubprocessError:
        os.close(fds.pop())  # the write end: the read below then ends
        with open(fds[0], "rb", closefd=False) as pipe:
            detail = pipe.read().decode("utf-8", "replace").strip()
        raise BindingError(detail or "a binding step failed in the child") from None
    except OSError as exc:
        seconds = time.perf_counter() - start
        return Run(slot, FAILED, None, seconds, None, f"cannot run {argv[0]!r}: {exc.strerror}")
    finally:
        for fd in fds:
            os.close(fd)
    current.append(proc)
    out, err = proc.communicate()
    seconds = time.perf_counter() - start
    current.clear()
    rc = proc.returncode
    if rc != 0:
        how = f"killed by {signal_name(-rc)}" if rc < 0 else f"exit status {rc}"
        last = _last_line(err) or _last_line(out)
        return Run(slot, FAILED, None, seconds, rc, how + (f": {last}" if last else ""))
    try:
        value = figure.read(out.decode("utf-8", "replace"), seconds)
    except FigureError as exc:
        return Run(slot, FAILED, None, seconds, rc, str(exc))
    return Run(slot, OK, value, seconds, rc)


def _stop(proc: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the child's process group, SIGKILL after `grace` seconds (or at once
    on a second Ctrl-C)."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except (subprocess.TimeoutExpired, KeyboardInterrupt, Stopped):
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
    # What the command started in its group and left behind goes too.
    signal_group(proc.pid, signal.SIGKILL)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""
