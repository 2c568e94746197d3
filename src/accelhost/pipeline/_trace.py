"""A run's spans and queue depths as Chrome trace events (open them in Perfetto)."""

from __future__ import annotations

import os
from typing import Any

from accelhost.pipeline._run import Run


def trace_events(r: Run) -> list[dict[str, Any]]:
    """One track per stage worker, one counter per queue, times relative to the start."""
    stages = r.settings.stages
    pid = os.getpid()
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": pid, "name": "process_name", "args": {"name": "accelhost.pipeline"}}
    ]
    t0 = r.t_start
    for tid, w in enumerate(r.workers, start=1):
        st = stages[w.stage]
        track = f"{w.stage + 1} {st.name} / worker {w.index}"
        meta = {"thread_name": {"name": track}, "thread_sort_index": {"sort_index": tid}}
        for name, args in meta.items():
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": name, "args": args})
        for start, end, seq, count in w.spans or []:
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
        label = f"queue before {stages[si].name}" if si < len(stages) else "output queue"
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
