"""Starting a run's workers, and the loops of its thread, async and process stages.

Processes start first, then their driver threads, the thread stages' workers and the
async stages' event loop. A failed start leaves the run as far as it got, every started
worker in its records, for the caller to tear down.

A process stage's worker is the process and the thread in the run that drives it, in
strict request/response over one duplex pipe: the parent sends `(value,)` (a batch's
value is its list) or None to stop, the child answers `(ok, value_or_error, t0, t1)`.
One message in flight at a time, so neither side blocks on a full pipe and the parent
always knows which item a dead worker was on. A dead process fails the run, naming its
item, and never hangs it (every wait also watches its sentinel and the abort pipe).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from time import perf_counter
from typing import Any, NoReturn

from accelhost.pipeline._channel import Aborted
from accelhost.pipeline._errors import PipelineError, annotate, exc_note
from accelhost.pipeline._run import Env, ProcessLink, Reply, Run, Worker, ending


def start(r: Run) -> None:
    stages = r.settings.stages
    if any(st.kind == "process" for st in stages):
        r.abort_r, r.abort_w = os.pipe()
    for w in r.workers:
        if stages[w.stage].kind == "process":
            start_process(r, w)
    async_workers = [w for w in r.workers if stages[w.stage].kind == "async"]
    for w in r.workers:
        st = stages[w.stage]
        if st.kind != "async":
            target = thread_worker if st.kind == "thread" else process_driver
            name = f"accelhost-pipeline-{w.stage + 1}-{st.name}-{w.index}"
            w.thread = threading.Thread(target=target, args=(r, w), name=name, daemon=True)
            w.thread.start()
    if async_workers:
        ready = threading.Event()
        t = threading.Thread(
            target=loop_main,
            args=(r, async_workers, ready),
            name="accelhost-pipeline-loop",
            daemon=True,
        )
        r.helpers.append(t)
        t.start()
        ready.wait()


def thread_worker(r: Run, w: Worker) -> None:
    si = w.stage
    st = r.settings.stages[si]
    fn, batch = st.fn, st.batch
    inq, outq = r.channels[si], r.channels[si + 1]
    # a BaseException from the stage (CancelledError too) fails the run
    with ending(r, outq, quiet=(Aborted,)):
        if batch is None:  # the hot path of cheap stages: kept short
            get, put, spans = inq.get_many, outq.put_many, w.spans
            while (envs := get(1)) is not None:
                env = envs[0]
                if env.error is None:
                    t0 = perf_counter()
                    try:
                        env.value = fn(env.value)
                    except Exception as exc:
                        w.errors += 1
                        r.item_failed(envs, si, exc)
                    t1 = perf_counter()
                    w.busy += t1 - t0
                    w.items += 1
                    w.calls += 1
                    if spans is not None:
                        spans.append((t0, t1, env.seq, 1))
                put(envs)
            return
        size, wait_s = batch.max_size, batch.max_wait_ms / 1000
        while (envs := inq.get_batch(size, wait_s)) is not None:
            good = [e for e in envs if e.error is None]
            if good:
                t0 = perf_counter()
                try:
                    ok, value = True, fn([e.value for e in good])
                except Exception as exc:
                    ok, value = False, exc
                r.outcome(w, good, (ok, value, t0, perf_counter()), batched=True)
            outq.put_many(envs)


def loop_main(r: Run, workers: list[Worker], ready: threading.Event) -> None:
    """The event loop of the run's async stages; the run cancels its tasks on abort."""
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        r.tasks = [loop.create_task(_async_worker(r, w)) for w in workers]
        r.loop = loop
        ready.set()
        if r.aborted:  # aborted before the loop existed: abort() could not cancel
            for t in r.tasks:
                t.cancel()
        loop.run_until_complete(asyncio.gather(*r.tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    except BaseException as exc:
        r.fail(exc)
    finally:
        ready.set()
        r.loop = None
        asyncio.set_event_loop(None)
        loop.close()


async def _async_worker(r: Run, w: Worker) -> None:
    si = w.stage
    st = r.settings.stages[si]
    fn: Callable[[Any], Awaitable[Any]] = st.fn
    inq, outq = r.channels[si], r.channels[si + 1]
    batched = st.batch is not None
    size, wait_s = (st.batch.max_size, st.batch.max_wait_ms / 1000) if st.batch else (1, 0.0)
    with ending(r, outq):
        while (envs := await inq.aget_batch(size, wait_s)) is not None:
            good = [e for e in envs if e.error is None]
            if good:
                arg = [e.value for e in good] if batched else good[0].value
                t0 = perf_counter()
                try:
                    ok, value = True, await fn(arg)
                except Exception as exc:
                    ok, value = False, exc
                r.outcome(w, good, (ok, value, t0, perf_counter()), batched)
            await outq.aput_many(envs)


def start_process(r: Run, w: Worker) -> None:
    st = r.settings.stages[w.stage]
    ctx: Any = multiprocessing.get_context(st.start_method)
    parent, child = ctx.Pipe(duplex=True)
    p = ctx.Process(
        target=child_main, args=(st.fn, child), name=f"accelhost-pipeline-{st.name}", daemon=True
    )
    try:
        p.start()
    except Exception as exc:
        child.close()
        parent.close()
        raise PipelineError(
            f"stage {w.stage + 1} ({st.name}): cannot start a worker process: {exc} "
            "(a process stage needs a function defined at module level)"
        ) from exc
    child.close()
    w.link = ProcessLink(p, parent)


def process_driver(r: Run, w: Worker) -> None:
    link = w.link
    assert link is not None
    si = w.stage
    st = r.settings.stages[si]
    inq, outq = r.channels[si], r.channels[si + 1]
    batched = st.batch is not None
    size, wait_s = (st.batch.max_size, st.batch.max_wait_ms / 1000) if st.batch else (1, 0.0)
    with ending(r, outq, quiet=(Aborted,)):  # a CancelledError here is no task's: it fails the run
        try:
            while (envs := inq.get_batch(size, wait_s)) is not None:
                good = _send(r, w, [e for e in envs if e.error is None], batched)
                if good:
                    r.outcome(w, good, _receive(r, w, good, batched), batched)
                outq.put_many(envs)
            if not r.aborted:  # the end of the input: the child may stop on its own
                with contextlib.suppress(OSError):
                    link.conn.send(None)
                link.proc.join(1.0)
        finally:
            if link.proc.is_alive():
                link.proc.terminate()
                link.proc.join(1.0)


def _send(r: Run, w: Worker, good: list[Env], batched: bool) -> list[Env]:
    """Send one item's value (or one batch's); the items sent. A value that cannot be
    pickled is that item's error, not its batch's."""
    assert w.link is not None
    while good:
        try:
            w.link.conn.send(([e.value for e in good] if batched else good[0].value,))
            return good
        except (EOFError, OSError):
            _died(r, w, good, batched)
        except Exception as exc:
            bad = [e for e in good if not _picklable(e.value)] or good
            for env in bad:
                w.errors += 1
                r.item_failed([env], w.stage, exc)
            good = [e for e in good if e not in bad]
    return good


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


def _receive(r: Run, w: Worker, good: list[Env], batched: bool) -> Reply:
    link = w.link
    assert link is not None
    if link.conn in mp_wait([link.conn, link.proc.sentinel, r.abort_r]):
        try:
            reply: Reply = link.conn.recv()
            return reply
        except (EOFError, OSError):
            pass
        except Exception as exc:  # it arrived whole, but its class rebuilds differently here
            err = PipelineError(
                f"stage {w.stage + 1} ({r.settings.stages[w.stage].label}): a result came "
                f"back from the worker process but cannot be unpickled here: "
                f"{type(exc).__name__}: {exc}"
            )
            err.__cause__ = exc
            now = perf_counter()
            return (False, err, now, now)
    if r.aborted:
        raise Aborted
    _died(r, w, good, batched)


def _died(r: Run, w: Worker, envs: list[Env], batched: bool) -> NoReturn:
    """A worker process is gone: fail the run, naming the item (or batch) it was on."""
    assert w.link is not None
    proc = w.link.proc
    proc.join(1.0)
    name = r.settings.stages[w.stage].label
    what = f"a batch of {len(envs)} items from #" if batched else "item #"
    exc = PipelineError(
        f"stage {w.stage + 1} ({name}): worker process {proc.pid} died "
        f"(exit code {proc.exitcode}) while working on {what}{envs[0].seq}"
    )
    annotate(exc, [e.seq for e in envs], [e.item for e in envs], w.stage, name)
    r.fail(exc)
    raise Aborted


class RemoteError(Exception):
    """Stands in for an exception from a worker process that could not be pickled."""


def portable_error(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a RemoteError saying what it
    was; the worker's traceback, lost in pickling, travels as a note."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.loads(pickle.dumps(exc))
        out = exc
    except Exception:
        out = RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    out.__traceback__ = None
    exc_note(out, "traceback in the worker process:\n" + text.rstrip())
    return out


def child_main(fn: Callable[[Any], Any], conn: Connection) -> None:
    """Serve calls until told to stop (or until the parent is gone)."""
    # Ctrl-C reaches the whole process group; the parent decides how the pipeline ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if msg is None:
            return
        t0 = perf_counter()
        try:
            ok, value = True, fn(msg[0])
        except Exception as exc:
            ok, value = False, portable_error(exc)
        reply = (ok, value, t0, perf_counter())
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as exc:  # the result cannot be pickled: send why instead
            err = RemoteError(f"the stage's result cannot be sent back from the worker: {exc}")
            conn.send((False, err, reply[2], reply[3]))
