"""One slow call holds back no item but its own, in a thread or a process stage.

The slow call blocks on an event the test controls, so nothing here depends on timing: a
regression shows up as items that arrive only after the slow call gave up waiting
(`returned` is set by then), and the test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import multiprocessing
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from accelhost.pipeline import Pipeline, Stage

N = 1000
SLOW = 300  # deep in a stream of cheap items
WAIT_S = 20.0


def block_on(release: Any, returned: Any, x: int) -> int:
    """Cheap, except item SLOW, which waits until the test releases it (or WAIT_S)."""
    if x == SLOW:
        release.wait(WAIT_S)
        returned.set()
    return x


Make = Callable[[], tuple[Stage, Any, Any]]


def _thread_stage() -> tuple[Stage, Any, Any]:
    release, returned = threading.Event(), threading.Event()
    return Stage(functools.partial(block_on, release, returned), workers=4), release, returned


def _process_stage() -> tuple[Stage, Any, Any]:
    ctx = multiprocessing.get_context("spawn")
    release, returned = ctx.Event(), ctx.Event()
    fn = functools.partial(block_on, release, returned)  # events travel at spawn time
    return Stage(fn, workers=4, kind="process"), release, returned


KINDS = pytest.mark.parametrize("make", [_thread_stage, _process_stage], ids=["thread", "process"])


def _take_until(gen: Iterator[int], want: set[int], returned: Any) -> list[int]:
    """Results until every item in `want` came out; they must not wait for the slow call."""
    got: list[int] = []
    missing = set(want)
    while missing:
        x = next(gen)
        got.append(x)
        missing.discard(x)
    assert not returned.is_set(), "items waited for the slow call"
    return got


@KINDS
def test_unordered_items_pass_a_slow_call_in_a_cheap_stage(make: Make) -> None:
    stage, release, returned = make()
    gen = Pipeline(stage, ordered=False).run(range(N))
    try:
        want = set(range(N)) - {SLOW}
        got = _take_until(gen, want, returned)
        assert SLOW not in got
        release.set()
        got += list(gen)
    finally:
        release.set()
        gen.close()
    assert sorted(got) == list(range(N))


@KINDS
def test_ordered_items_before_a_slow_call_are_not_held_and_order_holds(make: Make) -> None:
    stage, release, returned = make()
    gen = Pipeline(stage, ordered=True).run(range(N))
    try:
        got = _take_until(gen, set(range(SLOW)), returned)
        assert got == list(range(SLOW))
        release.set()
        got += list(gen)
    finally:
        release.set()
        gen.close()
    assert got == list(range(N))


def test_stream_takes_finished_items_from_a_slow_call_in_a_cheap_stage() -> None:
    stage, release, returned = _thread_stage()

    async def main() -> list[int]:
        got: list[int] = []
        missing = set(range(N)) - {SLOW}
        async with contextlib.aclosing(Pipeline(stage, ordered=False).stream(range(N))) as gen:
            async for x in gen:
                got.append(x)
                missing.discard(x)
                if not missing and not release.is_set():
                    assert not returned.is_set(), "items waited for the slow call"
                    release.set()
        return got

    try:
        got = asyncio.run(main())
    finally:
        release.set()
    assert sorted(got) == list(range(N))
