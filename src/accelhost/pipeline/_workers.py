"""Starting a run's workers, and the loops of the thread and async stages' workers.

Processes start first, then their driver threads, the thread stages' workers and the
async stages' event loop. A failed start leaves the run as far as it got, every started
worker in its records, for the caller to tear down.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from accelhost.pipeline._channel import Aborted
from accelhost.pipeline._process import process_driver, start_process
from accelhost.pipeline._run import Run, Worker, ending


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
    size = st.batch.max_size if st.batch is not None else 1
    wait_s = st.batch.max_wait_ms / 1000 if st.batch is not None else 0.0
    with ending(r, outq):
        while (envs := await inq.aget_batch(size, wait_s)) is not None:
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
                r.outcome(w, good, (ok, value, t0, perf_counter()), batched)
            await outq.aput_many(envs)
