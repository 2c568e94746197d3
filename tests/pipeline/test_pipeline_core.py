from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelhost.errors import AccelhostError
from accelhost.pipeline import Batch, Pipeline, PipelineError, Stage


def _jitter(seed: int) -> Any:
    rng = random.Random(seed)
    delays = [rng.random() * 0.004 for _ in range(1000)]

    def fn(x: int) -> int:
        time.sleep(delays[x % len(delays)])
        return x

    return fn


def tokenize(x: int) -> int:
    return x * 3


def forward(x: int) -> int:
    return x + 7


def detok(x: int) -> str:
    return f"<{x}>"


def serial(items: list[int]) -> list[str]:
    return [detok(forward(tokenize(x))) for x in items]


def _pipeline_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("accelhost-pipeline")]


def test_ordered_results_equal_serial_with_random_delays() -> None:
    items = list(range(300))
    j1, j2, j3 = _jitter(1), _jitter(2), _jitter(3)
    pipe = Pipeline(
        Stage(lambda x: tokenize(j1(x)), workers=4),
        Stage(lambda x: forward(j2(x)), workers=3),
        Stage(lambda x: detok(j3(x)), workers=5),
        queue_size=8,
    )
    assert list(pipe.run(items)) == serial(items)
    assert not _pipeline_threads()


def test_unordered_yields_every_result_once() -> None:
    items = list(range(300))
    j = _jitter(4)
    pipe = Pipeline(
        Stage(lambda x: tokenize(j(x)), workers=4), Stage(forward), Stage(detok), ordered=False
    )
    got = list(pipe.run(items))
    assert sorted(got) == sorted(serial(items))


def test_unordered_does_not_wait_for_a_slow_item() -> None:
    release = threading.Event()

    def slow_first(x: int) -> int:
        if x == 0:
            release.wait(10)
        return x

    pipe = Pipeline(Stage(slow_first, workers=2), ordered=False, queue_size=4)
    gen = pipe.run(range(50))
    try:
        first = [next(gen) for _ in range(10)]
        assert 0 not in first
    finally:
        release.set()
        gen.close()


def test_ordered_does_not_stall_unrelated_items() -> None:
    """Item 0 is held until 20 later items are done: they must not queue behind it."""
    release = threading.Event()
    done: list[int] = []
    lock = threading.Lock()

    def fn(x: int) -> int:
        if x == 0:
            assert release.wait(10), "later items never got past the stuck first one"
        with lock:
            done.append(x)
            if len(done) >= 20:
                release.set()
        return x

    pipe = Pipeline(Stage(fn, workers=3), queue_size=4)
    assert list(pipe.run(range(40))) == list(range(40))
    assert done.index(0) >= 20


def test_stage_error_surfaces_as_original_exception_with_item() -> None:
    class Boom(ValueError):
        pass

    def stage2(x: int) -> int:
        if x == tokenize(17):
            raise Boom(f"bad {x}")
        return x

    pipe = Pipeline(
        Stage(tokenize, workers=2), Stage(stage2, workers=2), Stage(detok), queue_size=4
    )
    t0 = time.monotonic()
    with pytest.raises(Boom, match="bad 51") as info:
        list(pipe.run(itertools.count()))  # an endless input must not keep it alive
    assert time.monotonic() - t0 < 10
    exc = info.value
    assert exc.pipeline_item == 17
    assert exc.pipeline_stage == "stage2"
    assert not _pipeline_threads()


def test_error_item_is_the_input_item() -> None:
    def stage2(x: int) -> int:
        if x == 30:  # tokenize(10) == 30
            raise KeyError(x)
        return x

    pipe = Pipeline(Stage(tokenize), Stage(stage2), Stage(detok))
    with pytest.raises(KeyError) as info:
        list(pipe.run(range(100)))
    exc = info.value
    assert exc.pipeline_item == 10
    assert exc.pipeline_index == 10
    assert exc.pipeline_stage == "stage2"
    if sys.version_info >= (3, 11):
        assert any("stage 2 (stage2)" in n and "#10" in n for n in exc.__notes__)
    assert not _pipeline_threads()


def test_on_error_skip_drops_failing_items() -> None:
    def picky(x: int) -> int:
        if x % 10 == 3:
            raise ValueError(x)
        return x

    pipe = Pipeline(Stage(picky, workers=3), Stage(forward), on_error="skip")
    assert list(pipe.run(range(50))) == [forward(x) for x in range(50) if x % 10 != 3]
    assert pipe.stats()["stages"][0]["errors"] == 5


def test_on_error_return_yields_the_exception_in_place() -> None:
    def picky(x: int) -> int:
        if x % 10 == 3:
            raise ValueError(x)
        return x

    pipe = Pipeline(Stage(picky, workers=3), Stage(forward), on_error="return")
    out = list(pipe.run(range(30)))
    assert len(out) == 30
    for x, got in enumerate(out):
        if x % 10 == 3:
            assert isinstance(got, ValueError)
            assert got.pipeline_item == x
        else:
            assert got == forward(x)


def test_early_consumer_exit_stops_everything() -> None:
    started = threading.Event()

    def slow(x: int) -> int:
        started.set()
        time.sleep(0.01)
        return x

    pipe = Pipeline(Stage(slow, workers=3), Stage(forward), queue_size=2)
    t0 = time.monotonic()
    for n, _ in enumerate(pipe.run(itertools.count())):
        if n == 5:
            break
    assert time.monotonic() - t0 < 10
    assert started.is_set()
    assert not _pipeline_threads()
    assert pipe.stats()["running"] is False


def test_stage_stuck_in_user_code_does_not_hang_the_caller() -> None:
    """A thread cannot be killed; the pipeline gives up on it after join_timeout and says so."""
    release = threading.Event()

    def stuck_on_zero(x: int) -> int:
        if x == 0:
            release.wait(30)
        return x

    pipe = Pipeline(Stage(stuck_on_zero, workers=2), ordered=False, join_timeout=0.2)
    try:
        t0 = time.monotonic()
        with pytest.warns(RuntimeWarning, match="still running a stage function"):
            for value in pipe.run(range(10)):
                assert value != 0
                break
        assert time.monotonic() - t0 < 10
    finally:
        release.set()


def test_input_iterable_error_propagates() -> None:
    def source() -> Any:
        yield 1
        yield 2
        raise RuntimeError("source broke")

    pipe = Pipeline(Stage(forward))
    with pytest.raises(RuntimeError, match="source broke"):
        list(pipe.run(source()))


def test_batching_regroups_items() -> None:
    sizes: list[int] = []

    def batched(xs: list[int]) -> list[int]:
        sizes.append(len(xs))
        return [x * 2 for x in xs]

    pipe = Pipeline(
        Stage(tokenize, workers=2),
        Stage(batched, batch=Batch(max_size=7, max_wait_ms=5)),
        Stage(forward, workers=2),
        queue_size=16,
    )
    items = list(range(200))
    assert list(pipe.run(items)) == [forward(tokenize(x) * 2) for x in items]
    assert sum(sizes) == 200
    assert max(sizes) <= 7
    assert max(sizes) > 1  # items really were grouped


def test_batch_of_wrong_length_is_an_error() -> None:
    pipe = Pipeline(Stage(lambda xs: xs[:-1], batch=Batch(4, 1)))
    with pytest.raises(PipelineError, match="one result per input"):
        list(pipe.run(range(10)))


def test_batch_error_attaches_every_item_of_the_batch() -> None:
    def bad(xs: list[int]) -> list[int]:
        if 5 in xs:
            raise ZeroDivisionError("nope")
        return xs

    pipe = Pipeline(Stage(bad, batch=Batch(4, 50)), on_error="return")
    out = list(pipe.run(range(12)))
    errors = [x for x in out if isinstance(x, ZeroDivisionError)]
    assert errors and 5 in errors[0].pipeline_item
    assert [x for x in out if not isinstance(x, BaseException)] == [
        x for x in range(12) if x not in errors[0].pipeline_item
    ]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workers": 0},
        {"kind": "fiber"},
        {"batch": 3},
        {"kind": "process", "start_method": "teleport"},
    ],
)
def test_bad_stage_arguments_are_user_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(PipelineError):
        Stage(forward, **kwargs)
    assert issubclass(PipelineError, AccelhostError)


def test_bad_pipeline_arguments_are_user_errors() -> None:
    with pytest.raises(PipelineError):
        Pipeline()
    with pytest.raises(PipelineError):
        Pipeline(Stage(forward), queue_size=0)
    with pytest.raises(PipelineError):
        Pipeline(Stage(forward), on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(PipelineError):
        Batch(0)


def test_zero_cost_stages_move_many_items() -> None:
    pipe = Pipeline(Stage(forward), Stage(forward), Stage(forward))
    n = 50_000
    assert list(pipe.run(range(n))) == [x + 21 for x in range(n)]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(0, 120),
    queue_size=st.integers(1, 9),
    shape=st.lists(
        st.tuples(st.integers(1, 4), st.one_of(st.none(), st.integers(1, 9))),
        min_size=1,
        max_size=4,
    ),
    ordered=st.booleans(),
)
def test_any_shape_gives_the_serial_results(
    n: int, queue_size: int, shape: list[tuple[int, int | None]], ordered: bool
) -> None:
    stages = []
    for k, (workers, batch) in enumerate(shape):
        if batch is None:
            stages.append(Stage(lambda x, k=k: x * 2 + k, workers=workers))
        else:
            stages.append(
                Stage(
                    lambda xs, k=k: [x * 2 + k for x in xs],
                    workers=workers,
                    batch=Batch(batch, 0.5),
                )
            )
    expected = list(range(n))
    for k in range(len(shape)):
        expected = [x * 2 + k for x in expected]
    got = list(Pipeline(*stages, queue_size=queue_size, ordered=ordered).run(range(n)))
    assert (got if ordered else sorted(got)) == expected
    assert not _pipeline_threads()


def test_ctrl_c_while_waiting_for_results_stops_everything() -> None:
    import os
    import signal

    def slow(x: int) -> int:
        time.sleep(0.05)
        return x

    pipe = Pipeline(Stage(slow, workers=2), queue_size=2)
    timer = threading.Timer(0.2, os.kill, args=(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in pipe.run(itertools.count()):
                pass
    finally:
        timer.cancel()
        timer.join()
    assert not _pipeline_threads()


def test_stop_iteration_in_a_stage_keeps_the_failing_item() -> None:
    """A generator cannot raise StopIteration (PEP 479): it must not become a bare
    RuntimeError that has lost the item."""

    def first_word(x: int) -> int:
        if x == forward(4):
            return next(iter([]))  # a stage bug that raises StopIteration
        return x

    pipe = Pipeline(Stage(forward), Stage(first_word, workers=2))
    with pytest.raises(PipelineError, match="StopIteration") as info:
        list(pipe.run(range(20)))
    exc = info.value
    assert isinstance(exc.__cause__, StopIteration)
    assert exc.pipeline_item == 4
    assert exc.pipeline_stage == "first_word"
    if sys.version_info >= (3, 11):
        assert any("stage 2 (first_word)" in n for n in exc.__notes__)
    assert not _pipeline_threads()


@pytest.mark.parametrize("wait_ms", [float("inf"), 1e300])
def test_batch_that_waits_for_a_full_batch_with_a_trickle(wait_ms: float) -> None:
    """A wait longer than the platform's longest timeout must not crash the worker."""
    sizes: list[int] = []

    def grouped(xs: list[int]) -> list[int]:
        sizes.append(len(xs))
        return xs

    def trickle() -> Any:
        for i in range(10):
            time.sleep(0.002)
            yield i

    pipe = Pipeline(Stage(grouped, batch=Batch(4, wait_ms)))
    assert list(pipe.run(trickle())) == list(range(10))
    assert sizes == [4, 4, 2]  # full batches, then what was left at the end


@pytest.mark.parametrize("wait_ms", [float("nan"), -1, "5"])
def test_batch_wait_must_be_a_number(wait_ms: Any) -> None:
    with pytest.raises(PipelineError, match="max_wait_ms"):
        Batch(4, wait_ms)
