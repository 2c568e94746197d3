"""The loops of a thread stage's worker and of an async stage's worker.

Every worker loop ends on end of stream, `Aborted` (or a task's cancellation), or an error
reported with `fail`, and always calls `producer_done` on its output channel.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from accelhost.pipeline._channel import Aborted, collect_batch
from accelhost.pipeline._run import Run, Worker


def thread_worker(r: Run, w: Worker) -> None:
    si = w.stage
    st = r.settings.stages[si]
    fn, batch = st.fn, st.batch
    inq, outq = r.channels[si], r.channels[si + 1]
    try:
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
        while (got := inq.get_many(size)) is not None:
            envs, eof = collect_batch(inq, got, size, wait_s)
            good = [e for e in envs if e.error is None]
            if good:
                t0 = perf_counter()
                try:
                    ok, value = True, fn([e.value for e in good])
                except Exception as exc:
                    ok, value = False, exc
                w.did(t0, perf_counter(), good[0].seq, len(good))
                r.outcome(w, good, ok, value, batched=True)
            outq.put_many(envs)
            if eof:
                return
    except Aborted:
        pass
    except BaseException as exc:  # a bug here or a BaseException from the stage
        r.fail(exc)
    finally:
        outq.producer_done()


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
    size = st.batch.max_size if st.batch is not None else 1
    wait_s = st.batch.max_wait_ms / 1000 if st.batch is not None else 0.0
    try:
        while (envs := await inq.aget_many(size)) is not None:
            eof = False
            deadline = perf_counter() + wait_s
            while len(envs) < size and (left := deadline - perf_counter()) > 0:
                more = await inq.aget_many(size - len(envs), timeout=left)
                if more is None:
                    eof = True
                    break
                if not more:  # hurried (see Channel.hurry)
                    break
                envs.extend(more)
            good = [e for e in envs if e.error is None]
            if good:
                t0 = perf_counter()
                try:
                    ok, value = (
                        True,
                        await fn([e.value for e in good] if batched else good[0].value),
                    )
                except Exception as exc:
                    ok, value = False, exc
                w.did(t0, perf_counter(), good[0].seq, len(good))
                r.outcome(w, good, ok, value, batched)
            await outq.aput_many(envs)
            if eof:
                return
    except (Aborted, asyncio.CancelledError):
        pass
    except BaseException as exc:
        r.fail(exc)
    finally:
        outq.producer_done()
