"""What a run reports: where its time went (`Pipeline.stats()`, read from the workers'
counters without a lock; the run is never changed), its spans and queue depths as Chrome
trace events, and the same figures for Prometheus, read at every scrape (a collector, not
live gauges: the hot path stays free of metric updates).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from time import perf_counter
from typing import Any

from accelhost.pipeline._errors import PipelineError
from accelhost.pipeline._run import Run, RunSettings


def stats(settings: RunSettings, r: Run | None, running: bool) -> dict[str, Any]:
    """`settings`: the pipeline's, which every run of it shares."""
    now = perf_counter()
    wall = ((r.t_end or now) - r.t_start) if r is not None else 0.0
    stages = []
    bubble = None
    for si, st in enumerate(settings.stages):
        ws = [w for w in r.workers if w.stage == si] if r is not None else []
        busy = sum(w.busy for w in ws)
        items = sum(w.items for w in ws)
        capacity = wall * st.workers
        idle = max(0.0, capacity - busy)
        depth = {"capacity": settings.queue_size, "now": 0, "mean": 0.0, "max": 0}
        if r is not None:
            ch = r.channels[si]
            depth.update(now=len(ch), mean=round(ch.depth_mean(r.t_end), 3), max=ch.depth_max)
        entry: dict[str, Any] = {
            "name": st.name,
            "kind": st.kind,
            "workers": st.workers,
            "device": st.device,
            "items": items,
            "errors": sum(w.errors for w in ws),
            "calls": sum(w.calls for w in ws),
            "busy_s": round(busy, 6),
            "idle_s": round(idle, 6),
            "busy_fraction": round(busy / capacity, 4) if capacity > 0 else 0.0,
            "idle_fraction": round(idle / capacity, 4) if capacity > 0 else 0.0,
            "items_per_s": round(items / wall, 3) if wall > 0 else 0.0,
            "queue_depth": depth,
        }
        if st.device and bubble is None:
            bubble = entry["idle_fraction"]
        stages.append(entry)
    return {
        "running": running,
        "wall_s": round(wall, 6),
        "items_in": r.fed if r is not None else 0,
        # results handed to the caller: an item dropped under on_error="skip" is not one
        "items_out": r.yielded if r is not None else 0,
        "bubble": bubble,
        "stages": stages,
    }


def trace_events(r: Run) -> list[dict[str, Any]]:
    """One track per stage worker, one counter per queue, times relative to the start."""
    stages = r.settings.stages
    pid = os.getpid()
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "accelhost.pipeline"}}
    ]
    t0 = r.t_start
    for tid, w in enumerate(r.workers, start=1):
        st = stages[w.stage]
        track = f"{w.stage + 1} {st.name} / worker {w.index}"
        meta = {"thread_name": {"name": track}, "thread_sort_index": {"sort_index": tid}}
        for name, args in meta.items():
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": name, "args": args})
        for start, end, seq, count in w.spans or []:
            name = f"#{seq}" if count == 1 else f"batch #{seq}+{count}"
            span = {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": st.name}
            args = {"first_item": seq, "items": count}
            events.append({**span, "ts": _us(start - t0), "dur": _us(end - start), "args": args})
    for si, ch in enumerate(r.channels):
        label = f"queue before {stages[si].name}" if si < len(stages) else "output queue"
        counter = {"ph": "C", "pid": pid, "name": label}
        for t, depth in ch.depth_trace or []:
            events.append({**counter, "ts": _us(t - t0), "args": {"depth": depth}})
    return events


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


# per stage: (metric name after the prefix, key of the stage's row, counter?, help)
_PER_STAGE = (
    ("stage_items", "items", True, "Items a stage has processed"),
    ("stage_errors", "errors", True, "Items a stage failed on"),
    ("stage_busy_seconds", "busy_s", True, "Worker-seconds spent in the stage function"),
    ("stage_idle_seconds", "idle_s", True, "Worker-seconds spent waiting"),
    ("stage_queue_depth", "depth", False, "Items waiting before the stage"),
    (
        "stage_queue_depth_mean",
        "depth_mean",
        False,
        "Time-weighted mean of the items waiting before the stage",
    ),
)


def collector(
    read_stats: Callable[[], dict[str, Any]],
    current_run: Callable[[], object],
    prefix: str,
    pipeline: str,
) -> Any:
    """A collector of `read_stats()`; `current_run()` tells one run from the next (any
    object that changes when a new run starts), so that idle counters restart with it."""
    try:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.registry import Collector
    except ImportError as exc:  # pragma: no cover - a core dependency, but stay clear
        raise PipelineError("Prometheus export needs prometheus-client installed") from exc

    class PipelineCollector(Collector):
        def __init__(self) -> None:
            self._lock = threading.Lock()
            self._run: object = None
            self._idle: dict[int, float] = {}

        def _monotonic_idle(self, run: object, stats: dict[str, Any]) -> list[float]:
            """Idle seconds that never go down within one run: a call's time counts as
            idle until it returns, so idle drops back then, which rate() would read as
            a reset. Hold the highest value seen; a new run is a new count."""
            with self._lock:
                if run is not self._run:
                    self._run, self._idle = run, {}
                for i, st in enumerate(stats["stages"]):
                    self._idle[i] = max(self._idle.get(i, 0.0), st["idle_s"])
                return [self._idle[i] for i in range(len(stats["stages"]))]

        def collect(self) -> Iterator[Any]:
            for _ in range(3):  # stats of the run that is current before and after
                run = current_run()
                stats = read_stats()
                if current_run() is run:
                    break
            idle_s = self._monotonic_idle(run, stats)
            rows = [
                {**st, "idle_s": idle, "depth": depth["now"], "depth_mean": depth["mean"]}
                for st, idle in zip(stats["stages"], idle_s, strict=True)
                for depth in [st["queue_depth"]]
            ]
            for suffix, key, counter, text in _PER_STAGE:
                kind = CounterMetricFamily if counter else GaugeMetricFamily
                family = kind(f"{prefix}_{suffix}", text, labels=["pipeline", "stage"])
                for row in rows:
                    family.add_metric([pipeline, str(row["name"])], row[key])
                yield family
            if stats["bubble"] is not None:
                bubble = GaugeMetricFamily(
                    f"{prefix}_device_idle_ratio",
                    "Fraction of the run the device stage sat idle (the bubble)",
                    labels=["pipeline"],
                )
                bubble.add_metric([pipeline], stats["bubble"])
                yield bubble

    return PipelineCollector()
