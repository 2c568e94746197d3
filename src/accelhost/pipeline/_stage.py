"""What the user describes: a `Stage` (function, workers, kind) and its optional `Batch`."""

from __future__ import annotations

import inspect
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from accelhost.pipeline._errors import PipelineError

Kind = Literal["thread", "process", "async"]
OnError = Literal["raise", "skip", "return"]


@dataclass(frozen=True)
class Batch:
    """Group items for a stage whose function takes a list and returns a list as long:
    handed on at `max_size` items or `max_wait_ms` after the first, whichever comes first
    (`math.inf`: only when full or at the end of input)."""

    max_size: int
    max_wait_ms: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_size, int) or self.max_size < 1:
            raise PipelineError(f"Batch max_size must be an integer >= 1, not {self.max_size!r}")
        wait = self.max_wait_ms
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not wait >= 0:
            # `not >= 0` also refuses NaN; inf is allowed: wait for a full batch (or the end)
            raise PipelineError(f"Batch max_wait_ms must be a number >= 0, not {wait!r}")


@dataclass
class Stage:
    """One step of the pipeline: `kind="thread"` for functions that release the GIL,
    `"process"` for pure-Python CPU work (a module-level function; values are pickled),
    `"async"` for a coroutine function on the run's own loop, `workers` items in flight.
    `device=True` marks the stage whose idle time is the device's bubble.
    """

    fn: Callable[..., Any]
    workers: int = 1
    kind: Kind = "thread"
    batch: Batch | None = None
    name: str | None = None
    device: bool = False
    start_method: str = "spawn"

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise PipelineError(f"Stage function must be callable, not {self.fn!r}")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise PipelineError(f"Stage workers must be an integer >= 1, not {self.workers!r}")
        if self.kind not in ("thread", "process", "async"):
            raise PipelineError(
                f"Stage kind must be 'thread', 'process' or 'async', not {self.kind!r}"
            )
        if self.kind == "async" and not inspect.iscoroutinefunction(self.fn):
            raise PipelineError("an async stage needs a coroutine function (async def)")
        if self.kind != "async" and inspect.iscoroutinefunction(self.fn):
            raise PipelineError(f"a coroutine function needs kind='async', not {self.kind!r}")
        if self.batch is not None and not isinstance(self.batch, Batch):
            raise PipelineError(f"Stage batch must be a Batch, not {self.batch!r}")
        if self.kind == "process" and self.start_method not in (
            methods := multiprocessing.get_all_start_methods()
        ):
            raise PipelineError(
                f"Stage start_method must be one of {methods}, not {self.start_method!r}"
            )
        if self.name is None:
            self.name = getattr(self.fn, "__name__", None) or type(self.fn).__name__

    @property
    def label(self) -> str:
        return self.name or ""
