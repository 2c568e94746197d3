"""Process stages: functions live at module level so spawned workers can import them."""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
import sys
import time

import pytest

from accelhost.pipeline import Batch, Pipeline, PipelineError, Stage


def square(x: int) -> int:
    return x * x


def fail_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError(f"seven is bad ({x})")
    return x


def die_on_five(x: int) -> int:
    if x == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def slowly(x: int) -> int:
    time.sleep(0.02)
    return x


def sums(xs: list[int]) -> list[int]:
    return [x + len(xs) * 0 for x in xs]


class Unpicklable(Exception):
    def __init__(self, handle: object) -> None:
        super().__init__("carries a lock")
        self.handle = handle

    def __reduce__(self):  # type: ignore[no-untyped-def]
        raise TypeError("cannot pickle this")


def raise_unpicklable(x: int) -> int:
    raise Unpicklable(x)


class TwoArgs(Exception):
    """Pickles fine, but unpickling calls TwoArgs(a) and fails: a value like this can leave
    a worker process and still not arrive."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__(a)
        self.b = b


def two_args_on_three(x: int) -> object:
    return TwoArgs(x, 0) if x == 3 else x + 100


def test_process_stage_results_in_order() -> None:
    pipe = Pipeline(Stage(square, workers=2, kind="process"), Stage(str), queue_size=4)
    assert list(pipe.run(range(100))) == [str(x * x) for x in range(100)]
    assert pipe.stats()["stages"][0]["items"] == 100


def test_process_stage_error_names_the_input_item() -> None:
    pipe = Pipeline(Stage(fail_on_seven, workers=2, kind="process"), Stage(str))
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="seven is bad") as info:
        list(pipe.run(itertools.count()))
    assert time.monotonic() - t0 < 10
    assert info.value.pipeline_item == 7
    if sys.version_info >= (3, 11):
        notes = "\n".join(info.value.__notes__)
        assert "traceback in the worker process" in notes
        assert "fail_on_seven" in notes
    assert not multiprocessing.active_children()


def test_unpicklable_error_becomes_a_remote_error() -> None:
    pipe = Pipeline(Stage(raise_unpicklable, kind="process"))
    with pytest.raises(Exception, match="Unpicklable") as info:
        list(pipe.run([1]))
    assert type(info.value).__name__ == "RemoteError"
    assert info.value.pipeline_item == 1


def test_worker_that_kills_itself_ends_the_pipeline_with_an_error() -> None:
    pipe = Pipeline(Stage(die_on_five, workers=2, kind="process"), Stage(str))
    t0 = time.monotonic()
    with pytest.raises(PipelineError, match="died") as info:
        list(pipe.run(range(50)))
    assert time.monotonic() - t0 < 10
    assert info.value.pipeline_item == 5
    assert not multiprocessing.active_children()


def test_worker_killed_from_outside_ends_the_pipeline_with_an_error() -> None:
    pipe = Pipeline(Stage(slowly, workers=2, kind="process"), queue_size=4)
    gen = pipe.run(itertools.count())
    with pytest.raises(PipelineError, match="died"):
        for n, _ in enumerate(gen):
            if n == 3:
                victim = multiprocessing.active_children()[0]
                os.kill(victim.pid, signal.SIGKILL)  # type: ignore[arg-type]
            assert n < 10_000, "the pipeline went on after its worker was killed"
    assert not multiprocessing.active_children()


def test_early_exit_stops_worker_processes() -> None:
    pipe = Pipeline(Stage(slowly, workers=2, kind="process"), queue_size=2)
    for n, _ in enumerate(pipe.run(itertools.count())):
        if n == 2:
            break
    assert not multiprocessing.active_children()


def test_batched_process_stage() -> None:
    pipe = Pipeline(Stage(sums, kind="process", batch=Batch(5, 5)))
    assert list(pipe.run(range(23))) == list(range(23))


def test_lambda_cannot_go_to_a_process() -> None:
    pipe = Pipeline(Stage(lambda x: x, kind="process"))
    with pytest.raises(PipelineError, match="module level"):
        list(pipe.run([1]))
    assert not multiprocessing.active_children()


def test_failed_start_stops_the_processes_already_started() -> None:
    pipe = Pipeline(
        Stage(square, workers=2, kind="process"),
        Stage(lambda x: x, kind="process"),
        join_timeout=2.0,
    )
    with pytest.raises(PipelineError, match="stage 2"):
        list(pipe.run([1]))
    assert not multiprocessing.active_children()


# the fork happens before the pipeline starts its threads; the warning (3.12+) counts
# the test harness's own threads (faulthandler's watchdog)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_fork_start_method() -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    pipe = Pipeline(Stage(lambda x: x + 1, kind="process", start_method="fork"))
    assert list(pipe.run(range(10))) == list(range(1, 11))


def test_trace_of_a_process_stage_uses_the_same_clock(tmp_path: object) -> None:
    import json

    pipe = Pipeline(Stage(slowly, kind="process"), Stage(str), trace=True)
    assert len(list(pipe.run(range(5)))) == 5
    path = f"{tmp_path}/t.json"
    pipe.write_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    spans = [e for e in events if e["ph"] == "X" and e["cat"] == "slowly"]
    assert sorted(e["args"]["first_item"] for e in spans) == list(range(5))
    wall_us = pipe.stats()["wall_s"] * 1e6
    for e in spans:  # spans timed in the child fall inside the parent's run
        assert e["ts"] >= 0 and e["ts"] + e["dur"] <= wall_us
        assert e["dur"] >= 20_000 * 0.9


def jitter(x: int) -> int:
    time.sleep(((x * 7919) % 13) / 4000)  # 0..3 ms, different per item
    return x * 5


def test_mixed_kinds_with_random_delays_match_serial() -> None:
    def stage3(x: int) -> str:
        time.sleep(((x * 104729) % 7) / 4000)
        return f"{x}!"

    pipe = Pipeline(
        Stage(square, workers=2),
        Stage(jitter, workers=3, kind="process"),
        Stage(stage3, workers=4),
        queue_size=8,
    )
    assert list(pipe.run(range(300))) == [f"{x * x * 5}!" for x in range(300)]


def test_cancelled_stream_stops_worker_processes() -> None:
    import asyncio

    seen: list[int] = []

    async def consume(pipe: Pipeline) -> None:
        async for x in pipe.stream(itertools.count()):
            seen.append(x)

    async def main() -> None:
        pipe = Pipeline(Stage(slowly, workers=2, kind="process"), queue_size=2)
        task = asyncio.create_task(consume(pipe))
        while len(seen) < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert not multiprocessing.active_children()


def test_unpicklable_value_fails_only_its_own_item() -> None:
    import threading

    def make(x: int) -> object:
        return threading.Lock() if x == 3 else x  # a lock cannot go to a process

    pipe = Pipeline(Stage(make), Stage(square, kind="process"), on_error="return")
    out = list(pipe.run(range(8)))
    assert isinstance(out[3], Exception) and out[3].pipeline_item == 3
    assert [v for i, v in enumerate(out) if i != 3] == [x * x for x in range(8) if x != 3]


def test_result_that_cannot_be_unpickled_fails_only_its_own_item() -> None:
    pipe = Pipeline(Stage(two_args_on_three, kind="process"), on_error="return")
    out = list(pipe.run(range(40)))  # a cheap stage: several items per message
    err = out[3]
    assert isinstance(err, PipelineError) and "cannot be unpickled" in str(err)
    assert isinstance(err.__cause__, TypeError)
    assert err.pipeline_item == 3
    assert [v for i, v in enumerate(out) if i != 3] == [x + 100 for x in range(40) if x != 3]
    assert not multiprocessing.active_children()


def test_result_that_cannot_be_unpickled_names_the_item_when_raised() -> None:
    pipe = Pipeline(Stage(two_args_on_three, workers=2, kind="process"))
    with pytest.raises(PipelineError, match="cannot be unpickled") as info:
        list(pipe.run(range(40)))
    assert info.value.pipeline_item == 3
    assert not multiprocessing.active_children()
