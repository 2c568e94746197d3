"""The pipeline benchmark: one workload run three ways in one process, so their ratios
mean something on a busy machine: the serial loop, the article's asyncio +
ThreadPoolExecutor recipe, and `accelhost.pipeline`. Simulated pre- and postprocessing
burn *CPU time* (the thread's CPU clock: waiting for the GIL does no work); the simulated
device sleeps, releasing the GIL as a real device call does.
"""

from __future__ import annotations

import asyncio
import functools
import os
import re
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TextIO

from accelhost import formats
from accelhost.errors import AccelhostError, UsageError
from accelhost.render import isatty

_UNITS = {"": 1e-3, "ms": 1e-3, "s": 1.0, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|us|µs|ns)?\s*$")


def parse_duration(text: str) -> float:
    """Seconds from '10ms', '0.5s', '250us' or a bare number of milliseconds."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"cannot read {text!r} as a duration (like 10ms, 0.5s, 250us)")
    return float(m.group(1)) * _UNITS[m.group(2) or ""]


def burn(seconds: float) -> None:
    """Hold the GIL doing pure-Python work until this thread used `seconds` of CPU."""
    clock = time.thread_time
    end = clock() + seconds
    x = 0
    while clock() < end:
        for i in range(100):
            x += i * i


@dataclass
class Workload:
    pre: Callable[[Any], Any]
    device: Callable[[Any], Any]
    post: Callable[[Any], Any]
    items: list[Any]
    slowest_s: float | None  # None: every stage is free, the bound is infinite
    label: str
    # the simulated stages' nominal costs (pre, device, post) in seconds; None when real,
    # and then the bound is the slowest stage's mean time in the serial run
    stage_s: tuple[float, float, float] | None = None


def _sim_cpu(seconds: float, factor: int, x: int) -> int:
    burn(seconds)
    return x * factor


def _sim_device(seconds: float, x: int) -> int:
    if seconds > 0:
        time.sleep(seconds)
    return x + 1


def simulated(pre_s: float, device_s: float, post_s: float, n: int) -> Workload:
    # module-level functions under partial: picklable, so they can run in worker processes
    pre = functools.partial(_sim_cpu, pre_s, 3)
    device = functools.partial(_sim_device, device_s)
    post = functools.partial(_sim_cpu, post_s, 2)
    slowest = max(pre_s, device_s, post_s) or None  # every stage free: no bound
    label = f"pre {pre_s * 1e3:g} ms, device {device_s * 1e3:g} ms, post {post_s * 1e3:g} ms"
    return Workload(
        pre, device, post, list(range(n)), slowest, label, stage_s=(pre_s, device_s, post_s)
    )


class Progress:
    """A one-line progress bar on a terminal; silent on pipes and files."""

    def __init__(self, total: int, out: TextIO | None = None) -> None:
        self.out = out if out is not None else sys.stderr
        self.enabled = isatty(self.out)
        self.total = total
        self.label = ""
        self.done = 0
        self._last = 0.0

    def start(self, label: str) -> None:
        self.label, self.done, self._last = label, 0, 0.0
        self._draw()

    def step(self, n: int = 1) -> None:
        self.done += n
        if self.enabled:
            now = time.monotonic()
            if now - self._last >= 0.1 or self.done >= self.total:
                self._last = now
                self._draw()

    def _draw(self) -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        bar = "#" * filled + "." * (width - filled)
        self.out.write(f"\r{self.label:<16} [{bar}] {self.done}/{self.total}")
        self.out.flush()

    def finish(self) -> None:
        if self.enabled:
            self.out.write("\r" + " " * 70 + "\r")
            self.out.flush()


@dataclass
class Result:
    items: int
    seconds: float
    device_busy_s: float
    outputs: list[Any] = field(repr=False, default_factory=list)

    def as_dict(self, slowest_s: float | None, serial_items_per_s: float | None) -> dict[str, Any]:
        ips = self.items / self.seconds if self.seconds > 0 else float("inf")
        return {
            "items": self.items,
            "seconds": round(self.seconds, 4),
            "items_per_s": round(ips, 2),
            "device_busy": round(self.device_busy_s / self.seconds, 4) if self.seconds else 0.0,
            "efficiency": None if slowest_s is None else round(ips * slowest_s, 4),
            "bound_items_per_s": None if slowest_s is None else round(1 / slowest_s, 2),
            "vs_serial": round(ips / serial_items_per_s, 3) if serial_items_per_s else None,
        }


def _measure(
    wl: Workload, progress: Progress, label: str, body: Callable[[Callable[[Any], Any]], list[Any]]
) -> Result:
    busy_s = 0.0

    def device(value: Any) -> Any:
        nonlocal busy_s
        t0 = time.perf_counter()
        try:
            return wl.device(value)
        finally:
            busy_s += time.perf_counter() - t0

    progress.start(label)
    t0 = time.perf_counter()
    outputs = body(device)
    seconds = time.perf_counter() - t0
    progress.finish()
    return Result(len(outputs), seconds, busy_s, outputs)


def run_serial(wl: Workload, progress: Progress) -> Result:
    stage_s = [0.0, 0.0, 0.0]

    def body(device: Callable[[Any], Any]) -> list[Any]:
        clock = time.perf_counter
        out = []
        for item in wl.items:
            value = item
            for i, stage in enumerate((wl.pre, device, wl.post)):
                t0 = clock()
                value = stage(value)
                stage_s[i] += clock() - t0
            out.append(value)
            progress.step()
        return out

    res = _measure(wl, progress, "serial", body)
    if wl.stage_s is None:
        wl.slowest_s = max(stage_s) / len(wl.items)
    return res


def run_asyncio_recipe(wl: Workload, progress: Progress) -> Result:
    """The article's recipe: a pool for CPU work, one thread for device submission."""

    def body(device: Callable[[Any], Any]) -> list[Any]:
        async def main() -> list[Any]:
            loop = asyncio.get_running_loop()
            with (
                ThreadPoolExecutor(max_workers=4) as cpu_executor,
                ThreadPoolExecutor(max_workers=1) as npu_executor,
            ):

                async def pipeline_step(request: Any) -> Any:
                    inputs = await loop.run_in_executor(cpu_executor, wl.pre, request)
                    outputs = await loop.run_in_executor(npu_executor, device, inputs)
                    result = await loop.run_in_executor(cpu_executor, wl.post, outputs)
                    progress.step()
                    return result

                return list(await asyncio.gather(*(pipeline_step(r) for r in wl.items)))

        return asyncio.run(main())

    return _measure(wl, progress, "asyncio recipe", body)


def run_accelhost(
    wl: Workload, progress: Progress, trace: str | None = None, cpu_kind: str = "thread"
) -> Result:
    from accelhost.pipeline import Pipeline, Stage

    pipes: list[Pipeline] = []

    def body(device: Callable[[Any], Any]) -> list[Any]:
        pipe = Pipeline(
            Stage(wl.pre, name="pre", kind=cpu_kind),  # type: ignore[arg-type]
            Stage(device, name="device", device=True),
            Stage(wl.post, name="post", kind=cpu_kind),  # type: ignore[arg-type]
            trace=trace is not None,
        )
        pipes.append(pipe)
        out = []
        for value in pipe.run(wl.items):
            out.append(value)
            progress.step()
        return out

    res = _measure(wl, progress, "accelhost", body)
    if trace is not None:  # after the clock stopped: writing the file is not the run's time
        try:
            pipes[0].write_trace(trace)
        except OSError as exc:
            raise AccelhostError(f"--trace: cannot write {trace}: {exc.strerror or exc}") from exc
    return res


def check_writable(path: str) -> None:
    """Refuse an unwritable `path` now, not after minutes of benchmark: a usage error."""
    if not path:
        raise UsageError("--trace: needs a file name")
    if os.path.isdir(path):
        raise UsageError(f"--trace: {path} is a directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--trace: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"--trace: {path} is not writable")


def bench(
    wl: Workload, progress: Progress, trace: str | None = None, cpu_kind: str = "thread"
) -> dict[str, Any]:
    """Run the three methods one after another; raise if their results differ."""
    results = {
        "serial": run_serial(wl, progress),
        "asyncio_recipe": run_asyncio_recipe(wl, progress),
        "accelhost": run_accelhost(wl, progress, trace=trace, cpu_kind=cpu_kind),
    }
    expected = results["serial"].outputs
    for name, res in results.items():
        if res.outputs != expected:
            raise AccelhostError(f"bench: {name} returned different results from the serial loop")
    s = results["serial"]
    serial_ips = s.items / s.seconds if s.seconds > 0 else None
    return {name: res.as_dict(wl.slowest_s, serial_ips) for name, res in results.items()}


def document(wl: Workload, report: dict[str, Any], cpu_kind: str) -> dict[str, Any]:
    """`bench pipeline --json`: the workload it ran (so that figures can be compared with
    the run that made them) and each method's figures."""
    stages = dict(zip(("pre_s", "device_s", "post_s"), wl.stage_s or (None,) * 3, strict=True))
    return {
        "format": formats.BENCH_PIPELINE,
        "workload": {
            "kind": "real" if wl.stage_s is None else "simulated",
            "label": wl.label,
            "items": len(wl.items),
            **stages,
            "cpu_kind": cpu_kind,
        },
        "methods": report,
        "notes": efficiency_notes(wl, report),
    }


def efficiency_notes(wl: Workload, report: dict[str, Any]) -> list[str]:
    """Why an efficiency is above 1, when one is: achieved / bound cannot exceed 1 unless
    the bound itself was off, and the table must not let it read as beating the bound."""
    above = [
        f"{_NAMES[key]} {r['efficiency']:.3f}"
        for key, r in report.items()
        if r["efficiency"] is not None and r["efficiency"] > 1.0
    ]
    if not above:
        return []
    if wl.stage_s is None:
        why = (
            "the bound is each stage's mean time measured in the serial run, where the "
            "stages ran one after another; measured that way it came out high, so this "
            "says the bound is loose, not that the run beat the slowest stage"
        )
    else:
        why = (
            "the stages took less than their set cost (timer and sleep granularity): "
            "read it as 1, the slowest stage's rate"
        )
    return [f"efficiency above 1 ({', '.join(above)}): {why}"]


_NAMES = {"serial": "serial loop", "asyncio_recipe": "asyncio recipe", "accelhost": "accelhost"}


def table_rows(report: dict[str, Any]) -> list[list[str]]:
    return [
        [
            name,
            str(r["items"]),
            f"{r['seconds']:.3f}",
            f"{r['items_per_s']:.1f}",
            f"{r['device_busy'] * 100:.1f}%",
            "-" if r["efficiency"] is None else f"{r['efficiency']:.3f}",
            "-" if r["vs_serial"] is None else f"{r['vs_serial']:.2f}x",
        ]
        for key, name in _NAMES.items()
        for r in [report[key]]
    ]


TABLE_HEADERS = ("method", "items", "seconds", "items/s", "device busy", "efficiency", "vs serial")
