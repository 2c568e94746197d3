"""The event loop of a run's async stages, on a thread of its own, and their workers.

The run cancels the tasks on abort; the ending rules are those of every worker loop (see
_thread_worker).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import Any

from accelhost.pipeline._channel import Aborted
from accelhost.pipeline._errors import check_batch
from accelhost.pipeline._run import Run, Worker


def loop_main(r: Run, workers: list[Worker], ready: threading.Event) -> None:
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
    max_size = st.batch.max_size if st.batch is not None else 1
    wait_s = st.batch.max_wait_ms / 1000 if st.batch is not None else 0.0
    try:
        while True:
            envs = await inq.aget_many(max_size)
            if envs is None:
                return
            eof = False
            if st.batch is not None and len(envs) < max_size and wait_s > 0:
                deadline = perf_counter() + wait_s
                while len(envs) < max_size:
                    left = deadline - perf_counter()
                    if left <= 0:
                        break
                    more = await inq.aget_many(max_size - len(envs), timeout=left)
                    if more is None:
                        eof = True
                        break
                    envs.extend(more)
            good = [e for e in envs if e.error is None]
            if good:
                t0 = perf_counter()
                if st.batch is not None:
                    values = [e.value for e in good]
                    try:
                        results = check_batch(si, st.label, values, await fn(values))
                    except Exception as exc:
                        w.errors += len(good)
                        r.item_failed(good, si, exc)
                    else:
                        for env, v in zip(good, results, strict=True):
                            env.value = v
                else:
                    env = good[0]
                    try:
                        env.value = await fn(env.value)
                    except Exception as exc:
                        w.errors += 1
                        r.item_failed([env], si, exc)
                t1 = perf_counter()
                w.busy += t1 - t0
                w.items += len(good)
                w.calls += 1
                if w.spans is not None:
                    w.spans.append((t0, t1, good[0].seq, len(good)))
            await outq.aput_many(envs)
            if eof:
                return
    except (Aborted, asyncio.CancelledError):
        pass
    except BaseException as exc:
        r.fail(exc)
    finally:
        w.ended = perf_counter()
        outq.producer_done()
