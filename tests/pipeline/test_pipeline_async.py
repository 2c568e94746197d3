"""`stream` and async stages: the same guarantees from inside an event loop."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from accelhost.pipeline import Batch, Pipeline, Stage


def _pipeline_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("accelhost-pipeline")]


async def agen(n: int | None, delay: float = 0.0) -> AsyncIterator[int]:
    for i in itertools.count() if n is None else range(n):
        if delay:
            await asyncio.sleep(delay)
        yield i


async def async_double(x: int) -> int:
    await asyncio.sleep(0.001 * (x % 3))
    return x * 2


def plus_one(x: int) -> int:
    return x + 1


def test_stream_ordered_with_async_stage() -> None:
    async def main() -> list[Any]:
        pipe = Pipeline(Stage(async_double, workers=8, kind="async"), Stage(plus_one))
        return [x async for x in pipe.stream(agen(200))]

    assert asyncio.run(main()) == [x * 2 + 1 for x in range(200)]
    assert not _pipeline_threads()


def test_stream_accepts_a_plain_iterable() -> None:
    async def main() -> list[Any]:
        pipe = Pipeline(Stage(plus_one, workers=2))
        return [x async for x in pipe.stream(range(100))]

    assert asyncio.run(main()) == list(range(1, 101))


def test_async_stage_under_run() -> None:
    pipe = Pipeline(Stage(plus_one), Stage(async_double, workers=4, kind="async"))
    assert list(pipe.run(range(100))) == [(x + 1) * 2 for x in range(100)]
    assert not _pipeline_threads()


def test_async_batched_stage() -> None:
    sizes: list[int] = []

    async def batch_fn(xs: list[int]) -> list[int]:
        sizes.append(len(xs))
        await asyncio.sleep(0)
        return [-x for x in xs]

    pipe = Pipeline(Stage(plus_one), Stage(batch_fn, kind="async", batch=Batch(6, 5)))
    assert list(pipe.run(range(40))) == [-(x + 1) for x in range(40)]
    assert sum(sizes) == 40 and max(sizes) <= 6


def test_cancelling_the_consumer_stops_everything() -> None:
    seen = []

    def slow(x: int) -> int:
        time.sleep(0.005)
        return x

    async def consume(pipe: Pipeline) -> None:
        async for x in pipe.stream(agen(None)):
            seen.append(x)

    async def main() -> None:
        pipe = Pipeline(Stage(slow, workers=2), Stage(async_double, kind="async"), queue_size=2)
        task = asyncio.create_task(consume(pipe))
        while len(seen) < 5:
            await asyncio.sleep(0.005)
        task.cancel()
        t0 = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - t0 < 10
        assert not _pipeline_threads()
        assert pipe.stats()["running"] is False

    asyncio.run(main())


def test_stream_early_exit_with_aclosing() -> None:
    async def main() -> list[int]:
        pipe = Pipeline(Stage(plus_one, workers=2), queue_size=2)
        out = []
        async with contextlib.aclosing(pipe.stream(agen(None))) as results:
            async for x in results:
                out.append(x)
                if len(out) == 3:
                    break
        assert not _pipeline_threads()
        return out

    assert asyncio.run(main()) == [1, 2, 3]


def test_stream_error_is_raised_to_the_consumer() -> None:
    async def bad(x: int) -> int:
        if x == 4:
            raise LookupError("four")
        return x

    async def main() -> None:
        pipe = Pipeline(Stage(bad, kind="async", workers=3))
        with pytest.raises(LookupError) as info:
            async for _ in pipe.stream(agen(None)):
                pass
        assert info.value.pipeline_item == 4

    asyncio.run(main())


def test_async_source_error_is_raised() -> None:
    async def source() -> AsyncIterator[int]:
        yield 1
        raise OSError("socket closed")

    async def main() -> None:
        pipe = Pipeline(Stage(plus_one))
        with pytest.raises(OSError, match="socket closed"):
            async for _ in pipe.stream(source()):
                pass

    asyncio.run(main())


def test_async_stage_stuck_awaiting_is_cancelled_on_early_exit() -> None:
    async def forever(x: int) -> int:
        if x == 0:
            await asyncio.sleep(3600)
        return x

    pipe = Pipeline(Stage(forever, kind="async", workers=2), ordered=False)
    t0 = time.monotonic()
    for value in pipe.run(range(10)):
        assert value != 0
        break
    assert time.monotonic() - t0 < 10
    assert not _pipeline_threads()


def test_cancelled_again_while_tearing_down_still_joins_every_worker() -> None:
    """A second cancel (a timeout or task group on top) must not skip the join."""
    gate = threading.Event()
    seen: list[int] = []

    def held(x: int) -> int:
        if x >= 3:
            gate.wait(3)  # busy in user code: the teardown has to wait for it
        return x

    async def consume(pipe: Pipeline) -> None:
        async for x in pipe.stream(agen(None)):
            seen.append(x)

    async def main() -> None:
        pipe = Pipeline(Stage(held, workers=2), queue_size=2, join_timeout=10)
        task = asyncio.create_task(consume(pipe))
        while len(seen) < 3:
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.05)
        assert not task.done(), "the teardown should still be waiting for the stage"
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not _pipeline_threads()
        s = pipe.stats()
        assert s["running"] is False
        assert pipe.stats()["wall_s"] == s["wall_s"]  # the run has an end

    try:
        asyncio.run(main())
    finally:
        gate.set()


def test_stop_async_iteration_in_an_async_stage_keeps_the_failing_item() -> None:
    from accelhost.pipeline import PipelineError

    async def bad(x: int) -> int:
        if x == 2:
            raise StopAsyncIteration("early")
        return x

    async def main() -> None:
        pipe = Pipeline(Stage(bad, kind="async", workers=2))
        with pytest.raises(PipelineError, match="StopAsyncIteration: early") as info:
            async for _ in pipe.stream(agen(10)):
                pass
        assert isinstance(info.value.__cause__, StopAsyncIteration)
        assert info.value.pipeline_item == 2

    asyncio.run(main())
    assert not _pipeline_threads()
