"""Starting a run's workers: processes first, then their driver threads, the thread
stages' workers and the async stages' event loop. A failed start leaves the run as far as
it got, every started worker in its records, for the caller to tear down.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from typing import Any

from accelhost.pipeline._errors import PipelineError
from accelhost.pipeline._proc import child_main
from accelhost.pipeline._process_driver import process_driver
from accelhost.pipeline._run import ProcessLink, Run, Worker
from accelhost.pipeline._thread_worker import loop_main, thread_worker


def start(r: Run) -> None:
    stages = r.settings.stages
    if any(st.kind == "process" for st in stages):
        r.abort_r, r.abort_w = os.pipe()
    for w in r.workers:
        if stages[w.stage].kind == "process":
            _start_process(r, w)
    async_workers: list[Worker] = []
    for w in r.workers:
        st = stages[w.stage]
        if st.kind == "async":
            async_workers.append(w)
            continue
        target: Callable[[Run, Worker], None] = (
            thread_worker if st.kind == "thread" else process_driver
        )
        t = threading.Thread(
            target=target,
            args=(r, w),
            name=f"accelhost-pipeline-{w.stage + 1}-{st.name}-{w.index}",
            daemon=True,
        )
        w.thread = t
        t.start()
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


def _start_process(r: Run, w: Worker) -> None:
    st = r.settings.stages[w.stage]
    ctx: Any = multiprocessing.get_context(st.start_method)
    parent, child = ctx.Pipe(duplex=True)
    p = ctx.Process(
        target=child_main,
        args=(st.fn, child),
        name=f"accelhost-pipeline-{st.name}",
        daemon=True,
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
