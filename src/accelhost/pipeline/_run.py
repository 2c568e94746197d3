"""The state of one `run`/`stream` call, and the settings it was started with.

Workers never block anywhere that `abort()` cannot wake (channel waits, the process
drivers' select on the abort pipe, the event loop's tasks): that bounds the time a run
needs to end on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import perf_counter
from typing import TYPE_CHECKING, Any

from accelhost.pipeline._channel import Aborted, Channel
from accelhost.pipeline._errors import PipelineError, annotate, check_batch, exc_note, stop_error
from accelhost.pipeline._stage import OnError, Stage

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

# Under `ordered`, how many items per stage worker may pass a slow item (and wait for it
# in the reorder buffer) besides those the queues hold.
AHEAD = 64

# what one call of a stage function gave: (ok, its value or error, t_start, t_end)
Reply = tuple[bool, Any, float, float]


@dataclass(frozen=True)
class RunSettings:
    stages: tuple[Stage, ...]
    queue_size: int
    ordered: bool
    on_error: OnError
    trace: bool
    join_timeout: float

    def window(self) -> int:
        """Items that may be inside the pipeline at once under `ordered`, the reorder
        buffer included: every queue full, plus AHEAD items (or a batch) per worker."""
        ahead = sum(st.workers * (st.batch.max_size if st.batch else AHEAD) for st in self.stages)
        return self.queue_size * (len(self.stages) + 1) + ahead


@dataclass(slots=True, eq=False)
class Env:
    """One item on its way: its seq restores input order, its item names an error."""

    seq: int
    item: Any
    value: Any
    error: BaseException | None = None


@dataclass(eq=False)
class ProcessLink:
    proc: BaseProcess
    conn: Connection
    closed: bool = False


@dataclass(eq=False)
class Worker:
    stage: int
    index: int
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
    settings: RunSettings
    # channel i feeds stage i (the last, the caller); its producers: the feeder, or the
    # workers of stage i - 1
    channels: list[Channel[Env]] = field(init=False)
    workers: list[Worker] = field(init=False)
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
    # the reorder buffer under `ordered`: items that came out ahead of an earlier one
    pending: dict[int, Env] = field(default_factory=dict)
    next_seq: int = 0

    def __post_init__(self) -> None:
        stages, size, trace = self.settings.stages, self.settings.queue_size, self.settings.trace
        self.channels = [Channel(size, n, trace) for n in (1, *(st.workers for st in stages))]
        self.workers = [
            Worker(si, wi, spans=[] if trace else None)
            for si, st in enumerate(stages)
            for wi in range(st.workers)
        ]

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.error is None and not self.aborted:
                self.error = exc
        self.abort()

    def outcome(self, w: Worker, good: list[Env], reply: Reply, batched: bool) -> None:
        """Count one call of the stage function on `good` and store what it returned in
        its items (a batch: one result each), or its error in all of them."""
        ok, value, t0, t1 = reply
        w.busy += t1 - t0
        w.items += len(good)
        w.calls += 1
        if w.spans is not None:
            w.spans.append((t0, t1, good[0].seq, len(good)))
        if ok and batched:
            try:
                value = check_batch(w.stage, self.settings.stages[w.stage].label, good, value)
            except PipelineError as exc:
                ok, value = False, exc
        if not ok:
            w.errors += len(good)
            self.item_failed(good, w.stage, value)
        elif batched:
            for env, v in zip(good, value, strict=True):
                env.value = v
        else:
            good[0].value = value

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
        """Abort if asked, join every thread, stop the processes, close what the run
        opened. An exception raised into this thread meanwhile (a second Ctrl-C) is held
        and raised at the end, so the teardown is never cut short."""
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
        # A process still alive here has no driver left to stop it. Each step can be run
        # again after an interruption without doing anything twice.
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
        if self.t_end is None:
            if stuck := self.pending_threads():
                names = ", ".join(t.name for t in stuck)
                warnings.warn(
                    f"accelhost.pipeline: {names} still running a stage function after the "
                    "pipeline ended; they are daemon threads and are left behind",
                    RuntimeWarning,
                    stacklevel=4,
                )
            self.t_end = perf_counter()

    def raise_if_failed(self) -> None:
        exc = self.error
        if isinstance(exc, (StopIteration, StopAsyncIteration)):
            raise stop_error(exc) from exc
        if exc is not None:
            raise exc
        if self.aborted:
            raise PipelineError("the pipeline was aborted")


_QUIET = (Aborted, asyncio.CancelledError)


@contextlib.contextmanager
def ending(
    r: Run, out: Channel[Env], quiet: tuple[type[BaseException], ...] = _QUIET, note: str = ""
) -> Iterator[None]:
    """How every producer (the feeder, each stage worker) ends: on `quiet` (`Aborted`, a
    task's cancellation) quietly, on any other error by failing the run (with `note`
    added); its output channel always learns that it is done."""
    try:
        yield
    except quiet:
        pass
    except BaseException as exc:
        if note:
            exc_note(exc, note)
        r.fail(exc)
    finally:
        out.producer_done()


def _steadily(step: Callable[[], object], held: BaseException | None) -> BaseException | None:
    """Run `step` to its end even if exceptions are raised into this thread meanwhile
    (it is run again: every step of a teardown may be); the first such one, or `held`."""
    while True:
        try:
            step()
            return held
        except BaseException as exc:
            held = held or exc
