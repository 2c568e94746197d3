"""A second Ctrl-C while the first one's teardown runs must not leak what the run opened.

The stage functions live at module level so that spawned worker processes can import them.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

import pytest

from accelhost.pipeline import Pipeline, Stage


def double(x: int) -> int:
    return x * 2


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


class Blocker:
    """A thread stage that, from its second item on, stays in the stage function until
    released: the teardown then waits for it in its join."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, x: int) -> int:
        if x > 0:
            self.entered.set()
            self.release.wait(120)
        return x


@pytest.fixture
def sigint_flag() -> Iterator[threading.Event]:
    """SIGINT raises KeyboardInterrupt as usual, and says when it was delivered."""
    delivered = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        delivered.set()
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield delivered
    finally:
        signal.signal(signal.SIGINT, old)


def _pipe(blocker: Blocker) -> Pipeline:
    return Pipeline(
        Stage(double, kind="process"),
        Stage(blocker),
        queue_size=2,
        join_timeout=60,  # the test releases the stuck call; the deadline is a safety net
    )


def test_second_ctrl_c_during_teardown_leaks_no_fd_or_process(
    sigint_flag: threading.Event,
) -> None:
    # a first full run: the multiprocessing machinery (resource tracker, shared-memory
    # arena) opens its own long-lived fds once, and they are not the run's to close
    warm = Blocker()
    warm.release.set()
    assert list(_pipe(warm).run(range(3))) == [0, 2, 4]
    before = _fds()

    blocker = Blocker()
    pipe = _pipe(blocker)
    gen = pipe.run(range(1000))
    assert next(gen) == 0
    assert blocker.entered.wait(60)
    driver = next(t for t in threading.enumerate() if t.name.startswith("accelhost-pipeline-1-"))
    main_ident = threading.get_ident()

    def second_ctrl_c() -> None:
        # the process driver ends once the teardown has aborted the run; the teardown is
        # then waiting for the stuck stage function
        driver.join(60)
        signal.pthread_kill(main_ident, signal.SIGINT)
        sigint_flag.wait(60)
        blocker.release.set()

    helper = threading.Thread(target=second_ctrl_c)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            gen.throw(KeyboardInterrupt)  # the first Ctrl-C, where the generator waits
    finally:
        blocker.release.set()
        helper.join(60)
    assert sigint_flag.is_set()  # the second Ctrl-C did arrive during the teardown
    assert pipe.stats()["running"] is False
    assert not [
        t for t in threading.enumerate() if t.name.startswith("accelhost-pipeline") and t.is_alive()
    ]
    assert _fds() == before
