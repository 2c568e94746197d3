"""Every pipeline test must leave no thread or process of its own behind."""

from __future__ import annotations

import faulthandler
import multiprocessing
import threading
import time
from collections.abc import Iterator

import pytest


def _ours() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("accelhost-pipeline")]


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    before = set(threading.enumerate())
    children_before = set(multiprocessing.active_children())
    # A deadlock must fail loudly, not stall the whole test run: dump every thread's
    # stack and exit if one test takes far longer than any of them should.
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
        # a short grace, then the verdict; processes are killed either way
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            extra = [t for t in threading.enumerate() if t not in before and t.is_alive()]
            kids = [p for p in multiprocessing.active_children() if p not in children_before]
            if not extra and not kids:
                break
            time.sleep(0.02)
        kids = [p for p in multiprocessing.active_children() if p not in children_before]
        for p in kids:
            p.kill()
            p.join(5)
    assert not kids, f"worker processes left behind: {kids}"
    assert not extra, f"threads left behind: {extra}"
