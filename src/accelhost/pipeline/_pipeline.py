"""`Pipeline`: the user's handle, which starts a `Run` per `run`/`stream` call and ends it,
and the run's two ends: the feeder that puts the caller's items in, and the reorder buffer
that hands the results out (bounded: under `ordered` the feeder lets at most
`RunSettings.window()` items be inside the run at once).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import AsyncGenerator, AsyncIterable, Generator, Iterable
from time import perf_counter
from typing import Any

from accelhost.pipeline import _workers
from accelhost.pipeline._channel import Aborted
from accelhost.pipeline._errors import PipelineError
from accelhost.pipeline._report import collector, stats, trace_events
from accelhost.pipeline._run import Env, Run, RunSettings, ending
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
            start_feeder(r, iterable)
            while (out := take(r)) is not None:
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
                feeder = asyncio.get_running_loop().create_task(afeed(r, source))
            else:
                start_feeder(r, source)
            while (out := await atake(r)) is not None:
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


def start_feeder(r: Run, iterable: Iterable[Any]) -> None:
    """Feed `iterable` from a thread of the run's own (joined when the run ends)."""
    feeder = threading.Thread(
        target=feed, args=(r, iterable), name="accelhost-pipeline-feed", daemon=True
    )
    r.helpers.append(feeder)
    feeder.start()


_NOTE = "accelhost.pipeline: raised by the input iterable"


def feed(r: Run, iterable: Iterable[Any]) -> None:
    first, window = r.channels[0], r.settings.window()
    with ending(r, first, note=_NOTE):
        for item in iterable:
            if r.aborted:
                break
            if r.settings.ordered and r.fed - r.released >= window:
                _hurry(r, True)
                with r.window_cond:
                    r.feeder_waiting = True
                    try:
                        while r.fed - r.released >= window and not r.aborted:
                            r.window_cond.wait(0.1)
                    finally:
                        r.feeder_waiting = False
                _hurry(r, False)
                if r.aborted:
                    raise Aborted
            first.put_many([Env(r.fed, item, item)])
            r.fed += 1


async def afeed(r: Run, aiterable: AsyncIterable[Any]) -> None:
    first, window = r.channels[0], r.settings.window()
    with ending(r, first, note=_NOTE):
        async for item in aiterable:
            if r.aborted:
                break
            if r.settings.ordered and r.fed - r.released >= window:
                _hurry(r, True)
                while r.fed - r.released >= window:
                    if r.aborted:
                        raise Aborted
                    await asyncio.sleep(0.001)
                _hurry(r, False)
            await first.aput_many([Env(r.fed, item, item)])
            r.fed += 1


def _hurry(r: Run, on: bool) -> None:
    """While the window is full no item comes in until one leaves, and the one awaited may
    sit in a batch waiting to fill: batches go on as they are until the feeder goes on."""
    for ch in r.channels:
        ch.hurry(on)


def take(r: Run) -> list[Any] | None:
    """The next results for the caller, in the order they may leave; None at the end."""
    try:
        return _settle(r, r.channels[-1].get_many(1 << 16))
    except Aborted:
        return None


async def atake(r: Run) -> list[Any] | None:
    """`take` for an event loop."""
    try:
        return _settle(r, await r.channels[-1].aget_many(1 << 16))
    except Aborted:
        return None


def _settle(r: Run, envs: list[Env] | None) -> list[Any] | None:
    """Results of the items taken from the last channel that may leave now (under
    `ordered`, once every earlier one has); a failed item leaves as its error under
    on_error='return', not at all under 'skip', and frees its place either way. None at
    the end."""
    if envs is None:
        return None
    if r.settings.ordered:
        ready: list[Env] = []
        pending, nxt = r.pending, r.next_seq
        for env in envs:
            if env.seq == nxt:
                ready.append(env)
                nxt += 1
                while nxt in pending:
                    ready.append(pending.pop(nxt))
                    nxt += 1
            else:
                pending[env.seq] = env
        r.next_seq = nxt
        envs = ready
    return_errors = r.settings.on_error == "return"
    out = [
        env.value if env.error is None else env.error
        for env in envs
        if env.error is None or return_errors
    ]
    r.released += len(envs)
    if r.feeder_waiting:
        with r.window_cond:
            r.window_cond.notify()
    return out
