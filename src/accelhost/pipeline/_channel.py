"""A bounded queue between two stages that threads and event loops can both wait on.

`queue.Queue` cannot be awaited, `asyncio.Queue` cannot be used from threads, and an
abort must wake every waiter at once, thread or coroutine.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Iterable
from time import perf_counter
from typing import Generic, TypeVar

T = TypeVar("T")
Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class Aborted(Exception):
    """Raised by every blocking operation once the pipeline is being torn down."""


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _wake(waiters: list[Waiter]) -> None:
    for loop, fut in waiters:
        # RuntimeError: that loop is closed, so nobody is waiting on it any more
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_resolve, fut)
    waiters.clear()


class Channel(Generic[T]):
    """Bounded multi-producer, multi-consumer queue with end-of-stream (None, once every
    producer is done and the queue is empty) and abort. `put_many` waits for room, then
    appends the whole list: a batch stays atomic, the depth may pass capacity by one batch.
    """

    def __init__(self, capacity: int, producers: int, trace: bool = False) -> None:
        self.capacity = capacity
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        # threads waiting on each condition: a notify costs microseconds, skip it when
        # nobody waits (the common case while items flow)
        self._getters = self._putters = 0
        self._producers = producers
        self._aborted = False
        self._hurry = False
        self._aget: list[Waiter] = []
        self._aput: list[Waiter] = []
        # time-weighted depth: the integral of depth over time, updated on every change
        self._t0 = self._t_last = perf_counter()
        self._area = 0.0
        self.depth_max = 0
        self.depth_trace: list[tuple[float, int]] | None = [] if trace else None

    def _changed(self, before: int, depth: int) -> None:
        now = perf_counter()
        self._area += before * (now - self._t_last)
        self._t_last = now
        if self.depth_trace is not None:
            self.depth_trace.append((now, depth))

    def depth_mean(self, now: float | None = None) -> float:
        with self._lock:
            now = perf_counter() if now is None else now
            span = now - self._t0
            area = self._area + len(self._items) * (now - self._t_last)
        return area / span if span > 0 else 0.0

    def __len__(self) -> int:
        return len(self._items)

    def _append(self, items: Iterable[T]) -> None:
        queue = self._items
        before = len(queue)
        queue.extend(items)
        depth = len(queue)
        self._changed(before, depth)
        if depth > self.depth_max:
            self.depth_max = depth
        if self._getters:
            self._not_empty.notify(depth - before)
        if self._aget:
            _wake(self._aget)

    def put_many(self, items: list[T]) -> None:
        with self._lock:
            queue, capacity = self._items, self.capacity
            while len(queue) >= capacity and not self._aborted:
                self._putters += 1
                try:
                    self._not_full.wait()
                finally:
                    self._putters -= 1
            if self._aborted:
                raise Aborted
            self._append(items)

    async def aput_many(self, items: list[T]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self._aborted:
                    raise Aborted
                if len(self._items) < self.capacity:
                    self._append(items)
                    return
                entry: Waiter = (loop, loop.create_future())
                self._aput.append(entry)
            try:
                await entry[1]
            finally:
                self._forget(self._aput, entry)

    def producer_done(self) -> None:
        with self._lock:
            self._producers -= 1
            if self._producers <= 0:
                self._not_empty.notify_all()
                _wake(self._aget)

    def _poll(self, max_n: int) -> list[T] | None:
        """Under the lock: up to max_n items, None at end of stream, [] to wait."""
        if self._aborted:
            raise Aborted
        items = self._items
        before = len(items)
        if not before:
            return None if self._producers <= 0 else []
        if max_n == 1:
            out = [items.popleft()]
        elif max_n >= before:
            out = list(items)
            items.clear()
        else:
            out = [items.popleft() for _ in range(max_n)]
        self._changed(before, len(items))
        if self._putters:
            self._not_full.notify(len(out))
        if self._aput:
            _wake(self._aput)
        return out

    def get_many(self, max_n: int, timeout: float | None = None) -> list[T] | None:
        """Up to max_n items; [] when the timeout passed; None at end of stream."""
        with self._lock:
            deadline = None if timeout is None else perf_counter() + timeout
            while True:
                got = self._poll(max_n)
                if got is None or got:
                    return got
                wait_s = None
                if deadline is not None:
                    wait_s = deadline - perf_counter()
                    if wait_s <= 0 or self._hurry:
                        return []
                    # a Batch may wait "forever" (inf): wait() takes no more than this
                    wait_s = min(wait_s, threading.TIMEOUT_MAX)
                self._getters += 1
                try:
                    self._not_empty.wait(wait_s)
                finally:
                    self._getters -= 1

    async def aget_many(self, max_n: int, timeout: float | None = None) -> list[T] | None:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            with self._lock:
                got = self._poll(max_n)
                if got is None or got or (deadline is not None and self._hurry):
                    return got
                entry: Waiter = (loop, loop.create_future())
                self._aget.append(entry)
            try:
                if deadline is None:
                    await entry[1]
                elif (left := deadline - loop.time()) <= 0:
                    return []
                else:
                    await asyncio.wait({entry[1]}, timeout=left)
            finally:
                self._forget(self._aget, entry)

    def get_batch(self, size: int, wait_s: float) -> list[T] | None:
        """Up to `size` items: waits for the first, then takes more as they come until
        `wait_s` after it (a batch filling up; cut short by `hurry`); None at end of stream."""
        items = self.get_many(size)
        deadline = perf_counter() + wait_s
        while items and len(items) < size and (left := deadline - perf_counter()) > 0:
            more = self.get_many(size - len(items), timeout=left)
            if not more:  # timed out or hurried; at the end, the next call returns None
                break
            items.extend(more)
        return items

    async def aget_batch(self, size: int, wait_s: float) -> list[T] | None:
        """`get_batch` for an event loop."""
        items = await self.aget_many(size)
        deadline = perf_counter() + wait_s
        while items and len(items) < size and (left := deadline - perf_counter()) > 0:
            more = await self.aget_many(size - len(items), timeout=left)
            if not more:
                break
            items.extend(more)
        return items

    def _forget(self, waiters: list[Waiter], entry: Waiter) -> None:
        with self._lock, contextlib.suppress(ValueError):
            waiters.remove(entry)

    def hurry(self, on: bool) -> None:
        """While on (the feeder waits for the ordered window to open), a wait with a
        timeout, a batch filling up, returns at once: see `_pipeline._hurry`."""
        with self._lock:
            self._hurry = on
            if on:
                self._not_empty.notify_all()
                _wake(self._aget)

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
            _wake(self._aget)
            _wake(self._aput)
