"""Prometheus export of `Pipeline.stats()`, read fresh at every scrape.

A custom collector rather than live Gauge objects: the pipeline's hot path stays free of
metric updates, and a scrape costs one `stats()` call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

from accelhost.pipeline._errors import PipelineError


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
            """Idle seconds that never go down within one run, as a counter must not.

            `stats()` credits a call's time as busy only when the call returns, so until
            then that time counts as idle, and idle drops back when the call ends: a
            scrape between the two would read it as a counter reset, and rate() as a
            spike. Hold the highest value seen until the real one catches up; a new run
            is a new count (a reset, which counters may have).
            """
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
            labels = ["pipeline", "stage"]
            items = CounterMetricFamily(
                f"{prefix}_stage_items", "Items a stage has processed", labels=labels
            )
            errors = CounterMetricFamily(
                f"{prefix}_stage_errors", "Items a stage failed on", labels=labels
            )
            busy = CounterMetricFamily(
                f"{prefix}_stage_busy_seconds",
                "Worker-seconds spent in the stage function",
                labels=labels,
            )
            idle = CounterMetricFamily(
                f"{prefix}_stage_idle_seconds", "Worker-seconds spent waiting", labels=labels
            )
            depth = GaugeMetricFamily(
                f"{prefix}_stage_queue_depth", "Items waiting before the stage", labels=labels
            )
            depth_mean = GaugeMetricFamily(
                f"{prefix}_stage_queue_depth_mean",
                "Time-weighted mean of the items waiting before the stage",
                labels=labels,
            )
            for i, st in enumerate(stats["stages"]):
                lv = [pipeline, str(st["name"])]
                items.add_metric(lv, st["items"])
                errors.add_metric(lv, st["errors"])
                busy.add_metric(lv, st["busy_s"])
                idle.add_metric(lv, idle_s[i])
                depth.add_metric(lv, st["queue_depth"]["now"])
                depth_mean.add_metric(lv, st["queue_depth"]["mean"])
            yield from (items, errors, busy, idle, depth, depth_mean)
            if stats["bubble"] is not None:
                bubble = GaugeMetricFamily(
                    f"{prefix}_device_idle_ratio",
                    "Fraction of the run the device stage sat idle (the bubble)",
                    labels=["pipeline"],
                )
                bubble.add_metric([pipeline], stats["bubble"])
                yield bubble

    return PipelineCollector()
