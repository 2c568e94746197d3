"""`Pipeline`: the user's handle, which starts a `Run` per `run`/`stream` call and ends it."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator, AsyncIterable, Generator, Iterable
from time import perf_counter
from typing import Any

from accelhost.pipeline import _ends, _workers
from accelhost.pipeline._errors import PipelineError
from accelhost.pipeline._report import collector, stats, trace_events
from accelhost.pipeline._run import Run, RunSettings
from accelhost.pipeline._stage import OnError, Stage


class Pipeline:
    """Overlapping stages joined by bounded queues. Everything a run starts ends before
    `run` or `stream` returns, raises or is closed, within `join_timeout` seconds."""

    def __init__(
        self,
        *stages: Stage,
        queue_size: int = 64,
        ordered: bool = True,
        on_error: OnError = "raise",
        trace: bool = False,
        join_timeout: float = 5.0,
    ) -> None:
        if not stages:
            raise PipelineError("a pipeline needs at least one stage")
        for s in stages:
            if not isinstance(s, Stage):
                raise PipelineError(f"pipeline stages must be Stage objects, not {s!r}")
        if not isinstance(queue_size, int) or queue_size < 1:
            raise PipelineError(f"queue_size must be an integer >= 1, not {queue_size!r}")
        if on_error not in ("raise", "skip", "return"):
            raise PipelineError(f"on_error must be 'raise', 'skip' or 'return', not {on_error!r}")
        self._settings = RunSettings(stages, queue_size, ordered, on_error, trace, join_timeout)
        self._run: Run | None = None
        self._active = False

    def run(self, iterable: Iterable[Any]) -> Generator[Any, None, None]:
        """Results for `iterable`, as a generator; closing it early stops everything."""
        r = self._start()
        ok = False
        try:
            _ends.start_feeder(r, iterable)
            while (out := _ends.take(r)) is not None:
                for value in out:
                    r.yielded += 1
                    yield value
            ok = True
        finally:
            self._end(r, clean=ok)
        r.raise_if_failed()

    async def stream(self, source: AsyncIterable[Any] | Iterable[Any]) -> AsyncGenerator[Any, None]:
        """Like `run`, for an event loop: results as an async generator.

        Cancelling the consuming task, or closing the generator (`aclose`, or
        `contextlib.aclosing` around an early `break`), stops the whole pipeline.
        """
        r = self._start()
        ok = False
        feeder: asyncio.Task[None] | None = None
        try:
            if isinstance(source, AsyncIterable):
                feeder = asyncio.get_running_loop().create_task(_ends.afeed(r, source))
            else:
                _ends.start_feeder(r, source)
            while (out := await _ends.atake(r)) is not None:
                for value in out:
                    r.yielded += 1
                    yield value
            ok = True
        finally:
            if not ok:
                r.abort()
            deadline = perf_counter() + r.settings.join_timeout
            try:
                if feeder is not None:
                    feeder.cancel()
                    await asyncio.gather(feeder, return_exceptions=True)
                await r.afinish(deadline)
            except BaseException:
                # Cancelled again while tearing down: the join must still happen, or the
                # workers outlive the stream; block for it (bounded by the same deadline).
                r.finish(deadline, abort=True)
                raise
            finally:
                self._active = False
        r.raise_if_failed()

    def stats(self) -> dict[str, Any]:
        """Where the time went in the current or last run, per stage: busy (inside the
        stage function) and idle (the rest; the device stage's idle fraction is the
        bubble), and the time-weighted queue depth."""
        return stats(self._settings, self._run, self._active)

    def prometheus_collector(self, prefix: str = "accelhost_pipeline", pipeline: str = "default"):  # type: ignore[no-untyped-def]
        """A prometheus-client collector reading `stats()` at each scrape."""
        return collector(self.stats, lambda: self._run, prefix, pipeline)

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the last run's spans as Chrome trace events (open in Perfetto)."""
        r = self._run
        if r is None or not r.settings.trace:
            raise PipelineError("no trace recorded: create the Pipeline with trace=True and run it")
        events = trace_events(r)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)

    def _start(self) -> Run:
        if self._active:
            raise PipelineError("this pipeline is already running; create another one")
        r = Run(self._settings)
        self._run = r
        self._active = True
        try:
            _workers.start(r)
        except BaseException:
            self._end(r, clean=False)
            raise
        return r

    def _end(self, r: Run, clean: bool) -> None:
        try:
            r.finish(perf_counter() + r.settings.join_timeout, abort=not clean)
        finally:
            self._active = False
