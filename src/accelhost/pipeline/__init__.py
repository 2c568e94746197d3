"""Overlapping CPU and device stages joined by bounded queues, so the device never waits.

`import accelhost.pipeline` pulls in the standard library only; torch helpers live in
`accelhost.pipeline.torch` and are imported by whoever wants them.

What lives where: `_stage` (Stage, Batch: what the user describes), `_pipeline` (Pipeline:
starts and ends runs; the feeder and the reorder buffer), `_run` (one run's state, settings
and per-worker records), `_workers` (starts a run's workers; the thread, async and process
stages' loops), `_channel` (the bounded queues), `_report` (stats, trace, Prometheus: what
a run reports), `_errors` (PipelineError and naming the failing item).
The benchmark, `accelhost bench pipeline`, lives in `accelhost.bench`.
"""

from __future__ import annotations

from accelhost.pipeline._errors import PipelineError
from accelhost.pipeline._pipeline import Pipeline
from accelhost.pipeline._stage import Batch, Stage

__all__ = ["Batch", "Pipeline", "PipelineError", "Stage"]
