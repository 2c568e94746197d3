"""Under `ordered`, a batch that waits to fill (`max_wait_ms=inf`) must not hold the one
item the full reorder window waits for: nothing more comes in until that item leaves."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from accelhost.pipeline import Batch, Pipeline, Stage


def same(xs: list[int]) -> list[int]:
    return xs


async def asame(xs: list[int]) -> list[int]:
    return xs


@pytest.mark.parametrize(
    ("kind", "async_source"),
    [("thread", False), ("async", False), ("process", False), ("thread", True)],
)
def test_item_late_into_a_filling_batch_when_the_window_is_full(
    kind: str, async_source: bool
) -> None:
    """Item 0 is held in the first stage until the feeder has filled the window; every
    later item goes past it into full batches of 4 (and a partial one). When 0 reaches
    the batch, its batch can never fill from the input: it must go on as it is."""
    gate = threading.Event()

    def hold_first(x: int) -> int:
        if x == 0:
            gate.wait(60)
        return x

    fn: Any = asame if kind == "async" else same
    pipe = Pipeline(
        Stage(hold_first, workers=2),
        Stage(fn, kind=kind, batch=Batch(4, math.inf)),  # type: ignore[arg-type]
        queue_size=1,
    )
    window = pipe._settings.window()
    n = 3 * window

    def source() -> Iterator[int]:
        for i in range(n):
            if i == window:  # the feeder takes it, then waits: 0 has not left
                gate.set()
            yield i

    async def asource() -> AsyncIterator[int]:
        for i in source():
            yield i

    async def collect() -> list[int]:
        return [x async for x in pipe.stream(asource() if async_source else source())]

    try:
        # a hang shows as a TimeoutError; the cancel ends the run and joins its workers
        out = asyncio.run(asyncio.wait_for(collect(), 60))
    finally:
        gate.set()
    assert out == list(range(n))
