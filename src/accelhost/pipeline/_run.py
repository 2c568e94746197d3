"""The state of one `run`/`stream` call, and the settings it was started with.

A `Run` knows nothing of the `Pipeline` that started it: it gets a frozen `RunSettings`
and holds one `Worker` record per stage worker. Workers never block anywhere that
`abort()` cannot wake: channel waits, the process drivers' select on the abort pipe, and
the event loop's tasks (cancelled). That is what bounds the time a run needs to end on
every path: finished, failed, closed early, or cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import warnings
from collections.abc import AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import perf_counter
from typing import TYPE_CHECKING, Any

from accelhost.pipeline._channel import Aborted, Channel
from accelhost.pipeline._errors import PipelineError, annotate, exc_note, stop_error
from accelhost.pipeline._stage import OnError, Stage

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

# Stages that cost next to nothing pull and push items in chunks of up to this many, so
# that a zero-cost stage does not pay one lock round trip and thread wake-up per item.
# A slow call does not hold the rest of its chunk back: see Hold in _channel.
CHUNK_MAX = 64
# Below this mean cost per item a stage is "cheap" and works in chunks; above it a stage
# takes one item at a time so that several workers share the load fairly.
CHEAP_S = 100e-6
# A worker holding finished items hands them on at least this often.
FLUSH_S = 0.5e-3


@dataclass(frozen=True)
class RunSettings:
    """What a run needs to know of its pipeline, fixed when the run starts."""

    stages: tuple[Stage, ...]
    queue_size: int
    ordered: bool
    on_error: OnError
    trace: bool
    join_timeout: float

    def window(self) -> int:
        """Items that may be inside the pipeline at once under `ordered`: every queue
        full, every worker holding a full chunk or batch. The reorder buffer can never
        hold more, so it is bounded without ever stalling a worker."""
        held = sum(
            st.workers * (st.batch.max_size if st.batch else CHUNK_MAX) for st in self.stages
        )
        return self.queue_size * (len(self.stages) + 1) + held


class Env:
    """One item on its way through the stages: an error can name the input item that
    caused it, and the reorder buffer can put results back in input order."""

    __slots__ = ("seq", "item", "value", "error")

    def __init__(self, seq: int, item: Any) -> None:
        self.seq = seq
        self.item = item
        self.value = item
        self.error: BaseException | None = None


@dataclass(eq=False)
class ProcessLink:
    """The parent's side of one worker process: the process, its pipe, and the shared
    values through which the child says which item of a chunk it is on (`current`) and
    the parent takes back the rest of a chunk (`limit`, under `lock`)."""

    proc: BaseProcess
    conn: Connection
    current: Any
    limit: Any
    lock: Any
    closed: bool = False


@dataclass(eq=False)
class Worker:
    """One worker of one stage: what runs it and what it has done."""

    stage: int
    index: int
    started: float = 0.0
    ended: float | None = None
    busy: float = 0.0
    items: int = 0
    errors: int = 0
    calls: int = 0
    # trace spans: (t_start, t_end, first seq, number of items)
    spans: list[tuple[float, float, int, int]] | None = None
    thread: threading.Thread | None = None
    link: ProcessLink | None = None


@dataclass(eq=False)
class Run:
    """Channels, workers and the first error of one run."""

    settings: RunSettings
    channels: list[Channel[Env]]
    workers: list[Worker] = field(default_factory=list)
    # threads that are not stage workers: the feeder, the async stages' event loop
    helpers: list[threading.Thread] = field(default_factory=list)
    t_start: float = field(default_factory=perf_counter)
    t_end: float | None = None
    error: BaseException | None = None
    aborted: bool = False
    fed: int = 0
    released: int = 0  # items that left the last channel, results or not
    yielded: int = 0  # results handed to the caller
    loop: asyncio.AbstractEventLoop | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    abort_r: int = -1
    abort_w: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)
    window_cond: threading.Condition = field(default_factory=threading.Condition)
    feeder_waiting: bool = False

    @classmethod
    def create(cls, settings: RunSettings) -> Run:
        size, trace = settings.queue_size, settings.trace
        channels: list[Channel[Env]] = [Channel(size, 1, trace)]
        channels += [Channel(size, st.workers, trace) for st in settings.stages]
        run = cls(settings, channels)
        for si, st in enumerate(settings.stages):
            for wi in range(st.workers):
                run.workers.append(Worker(si, wi, spans=[] if trace else None))
        return run

    # -- failure and teardown ------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.error is None and not self.aborted:
                self.error = exc
        self.abort()

    def item_failed(self, envs: list[Env], si: int, exc: BaseException) -> None:
        """Record an item's error: fatal under on_error='raise', else carried downstream."""
        name = self.settings.stages[si].label
        annotate(exc, [e.seq for e in envs], [e.item for e in envs], si, name)
        if self.settings.on_error == "raise":
            self.fail(exc)
            raise Aborted
        for env in envs:
            env.error = exc

    def abort(self) -> None:
        with self.lock:
            if self.aborted:
                return
            self.aborted = True
        self._wake_all()

    def _wake_all(self) -> None:
        """Wake every waiter of the run; harmless to repeat."""
        for ch in self.channels:
            ch.abort()
        with self.window_cond:
            self.window_cond.notify_all()
        if self.abort_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self.abort_w, b"x")
        loop = self.loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(self._cancel_tasks)

    def _stop(self) -> None:
        """abort(), made whole even if an earlier abort() was interrupted half way."""
        self.abort()
        self._wake_all()

    def _cancel_tasks(self) -> None:
        for task in self.tasks:
            task.cancel()

    def threads(self) -> list[threading.Thread]:
        return [w.thread for w in self.workers if w.thread is not None] + self.helpers

    def pending_threads(self) -> list[threading.Thread]:
        return [t for t in self.threads() if t.is_alive()]

    def finish(self, deadline: float, abort: bool = False) -> None:
        """Abort first if asked, join every thread, then stop the processes and close
        what the run opened.

        An exception raised into this thread meanwhile (a second Ctrl-C while the first
        one's teardown runs) does not cut the teardown short, which would leak the pipes
        and processes: it is held, the run is aborted, the teardown goes on (bounded by
        the deadline), and the exception is raised at the end.
        """
        held = _steadily(self._stop, None) if abort else None
        for t in self.threads():
            while True:
                try:
                    t.join(max(0.0, deadline - perf_counter()))
                    break
                except BaseException as exc:
                    held = _steadily(self._stop, held or exc)
        held = _steadily(lambda: self._reap(deadline), held)
        if held is not None:
            raise held

    async def afinish(self, deadline: float) -> None:
        while self.pending_threads() and perf_counter() < deadline:
            await asyncio.sleep(0.002)
        self.finish(deadline)

    def _reap(self, deadline: float) -> None:
        # A process still alive here has no driver left to stop it (its driver timed out,
        # or the run failed while starting): stop it, and kill it if it will not stop.
        # Each step can be run again after an interruption without doing anything twice.
        links = [w.link for w in self.workers if w.link is not None and not w.link.closed]
        for link in links:
            p = link.proc
            if p.is_alive():
                p.terminate()
                p.join(max(0.1, min(1.0, deadline - perf_counter())))
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for link in links:
            link.conn.close()
            if link.proc.exitcode is not None:
                link.proc.close()
                link.closed = True
        for name in ("abort_r", "abort_w"):
            fd = getattr(self, name)
            if fd >= 0:
                setattr(self, name, -1)
                os.close(fd)
        stuck = self.pending_threads()
        if stuck and self.t_end is None:
            names = ", ".join(t.name for t in stuck)
            warnings.warn(
                f"accelhost.pipeline: {names} still running a stage function after the "
                "pipeline ended; they are daemon threads and are left behind",
                RuntimeWarning,
                stacklevel=4,
            )
        if self.t_end is None:
            self.t_end = perf_counter()

    # -- feeding -------------------------------------------------------------------------
    def _window_wait(self, window: int) -> None:
        if self.fed - self.released < window:
            return
        with self.window_cond:
            self.feeder_waiting = True
            try:
                while self.fed - self.released >= window and not self.aborted:
                    self.window_cond.wait(0.1)
            finally:
                self.feeder_waiting = False
        if self.aborted:
            raise Aborted

    def release(self, n: int) -> None:
        self.released += n
        if self.feeder_waiting:
            with self.window_cond:
                self.window_cond.notify()

    def start_feeder(self, iterable: Iterable[Any]) -> None:
        """Feed `iterable` from a thread of the run's own (joined when the run ends)."""
        feeder = threading.Thread(
            target=self.feed, args=(iterable,), name="accelhost-pipeline-feed", daemon=True
        )
        self.helpers.append(feeder)
        feeder.start()

    def feed(self, iterable: Iterable[Any]) -> None:
        first = self.channels[0]
        ordered, window = self.settings.ordered, self.settings.window()
        try:
            for item in iterable:
                if self.aborted:
                    break
                if ordered:
                    self._window_wait(window)
                first.put_many([Env(self.fed, item)])
                self.fed += 1
        except Aborted:
            pass
        except BaseException as exc:
            exc_note(exc, "accelhost.pipeline: raised by the input iterable")
            self.fail(exc)
        finally:
            first.producer_done()

    async def afeed(self, aiterable: AsyncIterable[Any]) -> None:
        first = self.channels[0]
        ordered, window = self.settings.ordered, self.settings.window()
        try:
            async for item in aiterable:
                if self.aborted:
                    break
                while ordered and self.fed - self.released >= window:
                    if self.aborted:
                        raise Aborted
                    await asyncio.sleep(0.001)
                await first.aput_many([Env(self.fed, item)])
                self.fed += 1
        except (Aborted, asyncio.CancelledError):
            pass
        except BaseException as exc:
            exc_note(exc, "accelhost.pipeline: raised by the input iterable")
            self.fail(exc)
        finally:
            first.producer_done()

    # -- the consumer's end ----------------------------------------------------------------
    def settle(self, envs: list[Env], pending: dict[int, Env], nxt: int) -> tuple[list[Any], int]:
        """Turn a chunk from the last channel into results in the order they may leave.

        Items that failed leave as their error under on_error='return' and not at all
        under 'skip'; either way they free their place in the window.
        """
        return_errors = self.settings.on_error == "return"
        out: list[Any] = []
        if self.settings.ordered:
            ready: list[Env] = []
            for env in envs:
                if env.seq == nxt:
                    ready.append(env)
                    nxt += 1
                    while nxt in pending:
                        ready.append(pending.pop(nxt))
                        nxt += 1
                else:
                    pending[env.seq] = env
            envs = ready
        for env in envs:
            if env.error is None:
                out.append(env.value)
            elif return_errors:
                out.append(env.error)
        self.release(len(envs))
        return out, nxt

    def raise_if_failed(self) -> None:
        exc = self.error
        if exc is None:
            pass
        elif isinstance(exc, (StopIteration, StopAsyncIteration)):
            raise stop_error(exc) from exc
        else:
            raise exc
        if self.aborted:
            raise PipelineError("the pipeline was aborted")


def _steadily(step: Callable[[], object], held: BaseException | None) -> BaseException | None:
    """Run `step` to its end even if exceptions are raised into this thread meanwhile
    (it is run again: every step of a teardown may be); the first such one, or `held`."""
    while True:
        try:
            step()
            return held
        except BaseException as exc:
            held = held or exc
