"""Stages joined by bounded channels, run under structured concurrency.

Every item travels in one `_Env` from stage to stage, so an error can name the input item
that caused it and the reorder buffer can put results back in input order. Workers never
block anywhere that `abort()` cannot wake: channel waits, the process drivers' select on an
abort pipe, and the event loop's tasks (cancelled). That is what bounds the time `run` and
`stream` need to end on every path: finished, failed, closed early, or cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import threading
import warnings
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Generator, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from time import perf_counter
from typing import TYPE_CHECKING, Any, Literal

from accelhost.errors import AccelhostError
from accelhost.pipeline._channel import Aborted, Channel

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

Kind = Literal["thread", "process", "async"]
OnError = Literal["raise", "skip", "return"]

# Stages that cost next to nothing pull and push items in chunks of up to this many, so
# that a zero-cost stage does not pay one lock round trip and thread wake-up per item.
# A slow call does not hold the rest of its chunk back: see Hold in _channel.
CHUNK_MAX = 64
# Below this mean cost per item a stage is "cheap" and works in chunks; above it a stage
# takes one item at a time so that several workers share the load fairly.
CHEAP_S = 100e-6
# A worker holding finished items hands them on at least this often.
FLUSH_S = 0.5e-3


class PipelineError(AccelhostError):
    """A pipeline that was set up wrongly, or that failed for a reason other than an item.

    Errors raised by a stage function are re-raised as they are (same type), with the
    failing item attached; this class covers the rest: bad arguments, a worker process
    that died, a batch function returning the wrong number of results.
    """


@dataclass(frozen=True)
class Batch:
    """Group items for a stage whose function takes a list and returns a list as long.

    A batch is handed on when it holds `max_size` items or `max_wait_ms` after its first
    item arrived, whichever comes first, so a trickle of requests is not held back waiting
    for a full batch. `max_wait_ms=math.inf` waits for a full batch (or the end of input).
    """

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
    """One step of the pipeline and how it runs.

    `kind="thread"` suits functions that release the GIL (device calls, I/O, native
    tokenizers); `"process"` suits pure-Python CPU work, at the price of pickling values
    (the function must be importable: defined at module level); `"async"` runs a coroutine
    function on the pipeline's own event loop with `workers` items in flight.
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
        if self.kind == "process":
            import multiprocessing

            if self.start_method not in multiprocessing.get_all_start_methods():
                raise PipelineError(
                    f"Stage start_method must be one of "
                    f"{multiprocessing.get_all_start_methods()}, not {self.start_method!r}"
                )
        if self.name is None:
            self.name = getattr(self.fn, "__name__", None) or type(self.fn).__name__


class _Env:
    """One item on its way through the stages."""

    __slots__ = ("seq", "item", "value", "error")

    def __init__(self, seq: int, item: Any) -> None:
        self.seq = seq
        self.item = item
        self.value = item
        self.error: BaseException | None = None


@dataclass
class _WorkerStats:
    stage: int
    worker: int
    started: float = 0.0
    ended: float | None = None
    busy: float = 0.0
    items: int = 0
    errors: int = 0
    calls: int = 0
    # trace spans: (t_start, t_end, first seq, number of items)
    spans: list[tuple[float, float, int, int]] | None = None


def _annotate(exc: BaseException, env_items: list[_Env], stage: int, name: str) -> None:
    """Attach the failing input item(s) so the user can tell which request failed."""
    if len(env_items) == 1:
        item: Any = env_items[0].item
        index: Any = env_items[0].seq
        what = f"item #{index}: {_short(item)}"
    else:
        item = [e.item for e in env_items]
        index = [e.seq for e in env_items]
        what = f"a batch of {len(item)} items (#{index[0]}..#{index[-1]})"
    # an exception type with __slots__ takes no attributes: the note still tells
    with contextlib.suppress(AttributeError):
        exc.pipeline_item = item  # type: ignore[attr-defined]
        exc.pipeline_index = index  # type: ignore[attr-defined]
        exc.pipeline_stage = name  # type: ignore[attr-defined]
    exc_note(exc, f"accelhost.pipeline: raised in stage {stage + 1} ({name}) on {what}")


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass
class _Run:
    """The state of one `run`/`stream` call: channels, workers, first error."""

    pipe: Pipeline
    channels: list[Channel[_Env]]
    window: int
    ordered: bool
    t_start: float = field(default_factory=perf_counter)
    t_end: float | None = None
    threads: list[threading.Thread] = field(default_factory=list)
    procs: list[BaseProcess] = field(default_factory=list)
    conns: list[Connection] = field(default_factory=list)
    currents: list[Any] = field(default_factory=list)
    limits: list[Any] = field(default_factory=list)
    locks: list[Any] = field(default_factory=list)
    stats: list[_WorkerStats] = field(default_factory=list)
    error: BaseException | None = None
    aborted: bool = False
    fed: int = 0
    released: int = 0
    feeding_done: bool = False
    loop: asyncio.AbstractEventLoop | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    abort_r: int = -1
    abort_w: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)
    window_cond: threading.Condition = field(default_factory=threading.Condition)
    feeder_waiting: bool = False

    # -- failure and teardown ------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if self.error is None and not self.aborted:
                self.error = exc
        self.abort()

    def abort(self) -> None:
        with self.lock:
            if self.aborted:
                return
            self.aborted = True
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

    def _cancel_tasks(self) -> None:
        for task in self.tasks:
            task.cancel()

    def pending_workers(self) -> list[threading.Thread]:
        return [t for t in self.threads if t.is_alive()]

    def finish(self, deadline: float) -> None:
        """Join every worker, killing processes that outstay the deadline."""
        for t in self.threads:
            t.join(max(0.0, deadline - perf_counter()))
        self._reap(deadline)

    async def afinish(self, deadline: float) -> None:
        while self.pending_workers() and perf_counter() < deadline:
            await asyncio.sleep(0.002)
        self._reap(deadline)

    def _reap(self, deadline: float) -> None:
        # A process still alive here has no driver left to stop it (its driver timed out,
        # or the run failed while starting): stop it, and kill it if it will not stop.
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(max(0.1, min(1.0, deadline - perf_counter())))
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for conn in self.conns:
            conn.close()
        for p in self.procs:
            if p.exitcode is not None:
                p.close()
        for fd in (self.abort_r, self.abort_w):
            if fd >= 0:
                os.close(fd)
        self.abort_r = self.abort_w = -1
        stuck = self.pending_workers()
        if stuck:
            names = ", ".join(t.name for t in stuck)
            warnings.warn(
                f"accelhost.pipeline: {names} still running a stage function after the "
                "pipeline ended; they are daemon threads and are left behind",
                RuntimeWarning,
                stacklevel=3,
            )
        if self.t_end is None:
            self.t_end = perf_counter()

    # -- feeding -------------------------------------------------------------------------
    def _window_wait(self) -> None:
        if self.fed - self.released < self.window:
            return
        with self.window_cond:
            self.feeder_waiting = True
            try:
                while self.fed - self.released >= self.window and not self.aborted:
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
        self.threads.append(feeder)
        feeder.start()

    def feed(self, iterable: Iterable[Any]) -> None:
        first = self.channels[0]
        try:
            for item in iterable:
                if self.aborted:
                    break
                if self.ordered:
                    self._window_wait()
                first.put_many([_Env(self.fed, item)])
                self.fed += 1
        except Aborted:
            pass
        except BaseException as exc:
            exc_note(exc, "accelhost.pipeline: raised by the input iterable")
            self.fail(exc)
        finally:
            self.feeding_done = True
            first.producer_done()

    async def afeed(self, aiterable: AsyncIterable[Any]) -> None:
        first = self.channels[0]
        try:
            async for item in aiterable:
                if self.aborted:
                    break
                while self.ordered and self.fed - self.released >= self.window:
                    if self.aborted:
                        raise Aborted
                    await asyncio.sleep(0.001)
                await first.aput_many([_Env(self.fed, item)])
                self.fed += 1
        except (Aborted, asyncio.CancelledError):
            pass
        except BaseException as exc:
            exc_note(exc, "accelhost.pipeline: raised by the input iterable")
            self.fail(exc)
        finally:
            self.feeding_done = True
            first.producer_done()

    # -- the consumer's end ----------------------------------------------------------------
    def settle(self, envs: list[_Env], pending: dict[int, _Env], nxt: int) -> tuple[list[Any], int]:
        """Turn a chunk from the last channel into results in the order they may leave."""
        on_error = self.pipe.on_error
        out: list[Any] = []
        if self.ordered:
            ready: list[_Env] = []
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
            elif on_error == "return":
                out.append(env.error)
        self.release(len(envs))
        return out, nxt

    def raise_if_failed(self) -> None:
        exc = self.error
        if exc is None:
            pass
        elif isinstance(exc, (StopIteration, StopAsyncIteration)):
            # run() and stream() are generators: Python turns these two into a bare
            # RuntimeError when they leave one (PEP 479), which would lose the failing
            # item. Say so here, keep the item, and chain the original.
            raise _stop_error(exc) from exc
        else:
            raise exc
        if self.aborted:
            raise PipelineError("the pipeline was aborted")


def _stop_error(exc: BaseException) -> PipelineError:
    text = str(exc)
    err = PipelineError(
        f"{type(exc).__name__}{': ' + text if text else ''} was raised in the pipeline; "
        "it cannot leave a generator, so it is this error's __cause__"
    )
    for attr in ("pipeline_item", "pipeline_index", "pipeline_stage"):
        if hasattr(exc, attr):
            setattr(err, attr, getattr(exc, attr))
    for note in getattr(exc, "__notes__", []):
        exc_note(err, note)
    return err


def exc_note(exc: BaseException, note: str) -> None:
    """add_note on 3.11+; on 3.10 the same __notes__ list, which tracebacks ignore there."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
        return
    with contextlib.suppress(AttributeError):
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]


class Pipeline:
    """Overlapping stages joined by bounded queues.

    Everything a run starts (threads, processes, an event loop) ends before `run` or
    `stream` returns, raises, or is closed, within `join_timeout` seconds of the end:
    the pipeline never leaves work running behind the caller's back.
    """

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
        self.stages = list(stages)
        self.queue_size = queue_size
        self.ordered = ordered
        self.on_error: OnError = on_error
        self.trace = trace
        self.join_timeout = join_timeout
        self._run: _Run | None = None
        self._active = False

    # -- public API ------------------------------------------------------------------------
    def run(self, iterable: Iterable[Any]) -> Generator[Any, None, None]:
        """Results for `iterable`, as a generator; closing it early stops everything."""
        r = self._start()
        ok = False
        try:
            r.start_feeder(iterable)
            last = r.channels[-1]
            pending: dict[int, _Env] = {}
            nxt = 0
            while True:
                try:
                    envs = last.get_many(1 << 16)
                except Aborted:
                    break
                if envs is None:
                    break
                out, nxt = r.settle(envs, pending, nxt)
                yield from out
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
                feeder = asyncio.get_running_loop().create_task(r.afeed(source))
            else:
                r.start_feeder(source)
            last = r.channels[-1]
            pending: dict[int, _Env] = {}
            nxt = 0
            while True:
                try:
                    envs = await last.aget_many(1 << 16)
                except Aborted:
                    break
                if envs is None:
                    break
                out, nxt = r.settle(envs, pending, nxt)
                for value in out:
                    yield value
            ok = True
        finally:
            if not ok:
                r.abort()
            deadline = perf_counter() + self.join_timeout
            try:
                if feeder is not None:
                    feeder.cancel()
                    await asyncio.gather(feeder, return_exceptions=True)
                await r.afinish(deadline)
            except BaseException:
                # Cancelled again while tearing down (a second cancel(), a timeout or a
                # task group on top): the join must still happen, or worker threads,
                # processes and the abort pipe outlive the stream. Block for it instead;
                # finish() is bounded by the same deadline.
                r.abort()
                r.finish(deadline)
                raise
            finally:
                self._active = False
        r.raise_if_failed()

    def stats(self) -> dict[str, Any]:
        """Where the time went in the current or last run, per stage.

        Busy is time inside the stage function; idle is the rest of each worker's share of
        the run (waiting for input or for room downstream). The device stage's idle
        fraction is the bubble. Queue depth is time-weighted over the run, not sampled at
        arbitrary moments, so short bursts are neither missed nor overweighted.
        """
        r = self._run
        now = perf_counter()
        wall = ((r.t_end or now) - r.t_start) if r is not None else 0.0
        stages = []
        bubble = None
        for si, st in enumerate(self.stages):
            ws = [w for w in r.stats if w.stage == si] if r is not None else []
            busy = sum(w.busy for w in ws)
            items = sum(w.items for w in ws)
            capacity = wall * st.workers
            idle = max(0.0, capacity - busy)
            depth = {"capacity": self.queue_size, "now": 0, "mean": 0.0, "max": 0}
            if r is not None:
                ch = r.channels[si]
                depth.update(now=len(ch), mean=round(ch.depth_mean(r.t_end), 3), max=ch.depth_max)
            entry: dict[str, Any] = {
                "name": st.name,
                "kind": st.kind,
                "workers": st.workers,
                "device": st.device,
                "items": items,
                "errors": sum(w.errors for w in ws),
                "calls": sum(w.calls for w in ws),
                "busy_s": round(busy, 6),
                "idle_s": round(idle, 6),
                "busy_fraction": round(busy / capacity, 4) if capacity > 0 else 0.0,
                "idle_fraction": round(idle / capacity, 4) if capacity > 0 else 0.0,
                "items_per_s": round(items / wall, 3) if wall > 0 else 0.0,
                "queue_depth": depth,
            }
            if st.device and bubble is None:
                bubble = entry["idle_fraction"]
            stages.append(entry)
        return {
            "running": self._active,
            "wall_s": round(wall, 6),
            "items_in": r.fed if r is not None else 0,
            "items_out": r.released if r is not None else 0,
            "bubble": bubble,
            "stages": stages,
        }

    def prometheus_collector(self, prefix: str = "accelhost_pipeline", pipeline: str = "default"):  # type: ignore[no-untyped-def]
        """A prometheus-client collector reading `stats()` at each scrape."""
        from accelhost.pipeline._metrics import collector

        return collector(self, prefix, pipeline)

    def write_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the last run's spans as Chrome trace events (open in Perfetto)."""
        r = self._run
        if r is None or not self.trace:
            raise PipelineError("no trace recorded: create the Pipeline with trace=True and run it")
        events = trace_events(self, r)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)

    # -- starting ------------------------------------------------------------------------
    def _start(self) -> _Run:
        if self._active:
            raise PipelineError("this pipeline is already running; create another one")
        n = len(self.stages)
        channels: list[Channel[_Env]] = [Channel(self.queue_size, 1, self.trace)]
        for st in self.stages:
            channels.append(Channel(self.queue_size, st.workers, self.trace))
        window = self.queue_size * (n + 1) + sum(
            st.workers * (st.batch.max_size if st.batch else CHUNK_MAX) for st in self.stages
        )
        r = _Run(self, channels, window, self.ordered)
        self._run = r
        self._active = True
        try:
            if any(st.kind == "process" for st in self.stages):
                r.abort_r, r.abort_w = os.pipe()
            self._start_processes(r)
            self._start_workers(r)
        except BaseException:
            self._end(r, clean=False)
            raise
        return r

    def _end(self, r: _Run, clean: bool) -> None:
        try:
            if not clean:
                r.abort()
            r.finish(perf_counter() + self.join_timeout)
        finally:
            self._active = False

    def _start_processes(self, r: _Run) -> None:
        import multiprocessing

        from accelhost.pipeline._proc import child_main

        for si, st in enumerate(self.stages):
            if st.kind != "process":
                continue
            ctx = multiprocessing.get_context(st.start_method)
            for _ in range(st.workers):
                parent, child = ctx.Pipe(duplex=True)
                current = ctx.RawValue("q", 0)
                r.currents.append(current)
                limit = ctx.RawValue("q", 0)
                r.limits.append(limit)
                lock = ctx.Lock()
                r.locks.append(lock)
                p = ctx.Process(  # type: ignore[attr-defined]
                    target=child_main,
                    args=(st.fn, child, st.batch is not None, current, limit, lock),
                    name=f"accelhost-pipeline-{st.name}",
                    daemon=True,
                )
                r.conns.append(parent)
                try:
                    p.start()
                except Exception as exc:
                    child.close()
                    raise PipelineError(
                        f"stage {si + 1} ({st.name}): cannot start a worker process: {exc} "
                        "(a process stage needs a function defined at module level)"
                    ) from exc
                child.close()
                r.procs.append(p)

    def _start_workers(self, r: _Run) -> None:
        from accelhost.pipeline import _workers

        proc_i = 0
        async_jobs: list[tuple[int, int, _WorkerStats]] = []
        for si, st in enumerate(self.stages):
            for wi in range(st.workers):
                ws = _WorkerStats(si, wi, started=perf_counter())
                if self.trace:
                    ws.spans = []
                r.stats.append(ws)
                if st.kind == "async":
                    async_jobs.append((si, wi, ws))
                    continue
                if st.kind == "thread":
                    target: Callable[..., None] = _workers.thread_worker
                    args: tuple[Any, ...] = (r, si, ws)
                else:
                    target = _workers.process_driver
                    args = (r, si, ws, proc_i)
                    proc_i += 1
                t = threading.Thread(
                    target=target,
                    args=args,
                    name=f"accelhost-pipeline-{si + 1}-{st.name}-{wi}",
                    daemon=True,
                )
                r.threads.append(t)
                t.start()
        if async_jobs:
            ready = threading.Event()
            t = threading.Thread(
                target=_workers.loop_main,
                args=(r, async_jobs, ready),
                name="accelhost-pipeline-loop",
                daemon=True,
            )
            r.threads.append(t)
            t.start()
            ready.wait()


def trace_events(pipe: Pipeline, r: _Run) -> list[dict[str, Any]]:
    pid = os.getpid()
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "accelhost.pipeline"}}
    ]
    t0 = r.t_start
    for tid, ws in enumerate(r.stats, start=1):
        st = pipe.stages[ws.stage]
        track = f"{ws.stage + 1} {st.name} / worker {ws.worker}"
        events.append(
            {"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": track}}
        )
        events.append(
            {
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "name": "thread_sort_index",
                "args": {"sort_index": tid},
            }
        )
        for start, end, seq, count in ws.spans or []:
            name = f"#{seq}" if count == 1 else f"batch #{seq}+{count}"
            events.append(
                {
                    "ph": "X",
                    "pid": pid,
                    "tid": tid,
                    "name": name,
                    "cat": st.name,
                    "ts": round((start - t0) * 1e6, 3),
                    "dur": round((end - start) * 1e6, 3),
                    "args": {"first_item": seq, "items": count},
                }
            )
    for si, ch in enumerate(r.channels):
        label = f"queue before {pipe.stages[si].name}" if si < len(pipe.stages) else "output queue"
        for t, depth in ch.depth_trace or []:
            events.append(
                {
                    "ph": "C",
                    "pid": pid,
                    "name": label,
                    "ts": round((t - t0) * 1e6, 3),
                    "args": {"depth": depth},
                }
            )
    return events
