"""Where a run's time went, per stage, as the dict that `Pipeline.stats()` returns (read
from the workers' counters without a lock; the run is never changed)."""

from __future__ import annotations

from time import perf_counter
from typing import Any

from accelhost.pipeline._run import Run, RunSettings


def stats(settings: RunSettings, r: Run | None, running: bool) -> dict[str, Any]:
    """`settings` are those of `r` when there is a run, else the pipeline's current ones."""
    now = perf_counter()
    wall = ((r.t_end or now) - r.t_start) if r is not None else 0.0
    stages = []
    bubble = None
    for si, st in enumerate(settings.stages):
        ws = [w for w in r.workers if w.stage == si] if r is not None else []
        busy = sum(w.busy for w in ws)
        items = sum(w.items for w in ws)
        capacity = wall * st.workers
        idle = max(0.0, capacity - busy)
        depth = {"capacity": settings.queue_size, "now": 0, "mean": 0.0, "max": 0}
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
        "running": running,
        "wall_s": round(wall, 6),
        "items_in": r.fed if r is not None else 0,
        # results handed to the caller: an item dropped under on_error="skip" is not one
        "items_out": r.yielded if r is not None else 0,
        "bubble": bubble,
        "stages": stages,
    }
