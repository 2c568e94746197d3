"""Prometheus export of `Pipeline.stats()`, read at every scrape (a collector, not live
gauges: the hot path stays free of metric updates)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from accelhost.pipeline._errors import PipelineError

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
