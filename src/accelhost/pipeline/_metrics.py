"""Prometheus export of `Pipeline.stats()`, read fresh at every scrape.

A custom collector rather than live Gauge objects: the pipeline's hot path stays free of
metric updates, and a scrape costs one `stats()` call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelhost.pipeline._core import Pipeline


def collector(pipe: Pipeline, prefix: str, pipeline: str) -> Any:
    try:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        from prometheus_client.registry import Collector
    except ImportError as exc:  # pragma: no cover - a core dependency, but stay clear
        from accelhost.pipeline._core import PipelineError

        raise PipelineError("Prometheus export needs prometheus-client installed") from exc

    class PipelineCollector(Collector):
        def collect(self) -> Iterator[Any]:
            stats = pipe.stats()
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
            for st in stats["stages"]:
                lv = [pipeline, str(st["name"])]
                items.add_metric(lv, st["items"])
                errors.add_metric(lv, st["errors"])
                busy.add_metric(lv, st["busy_s"])
                idle.add_metric(lv, st["idle_s"])
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
