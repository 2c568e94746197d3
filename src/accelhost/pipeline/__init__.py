"""Overlapping CPU and device stages joined by bounded queues, so the device never waits.

`import accelhost.pipeline` pulls in the standard library only; torch helpers live in
`accelhost.pipeline.torch` and are imported by whoever wants them.
"""

from __future__ import annotations

from accelhost.pipeline._core import Batch, Pipeline, PipelineError, Stage

__all__ = ["Batch", "Pipeline", "PipelineError", "Stage"]
