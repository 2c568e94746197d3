"""A bounded queue between two stages that threads and event loops can both wait on.

`queue.Queue` pays a lock round trip per item and cannot be awaited; `asyncio.Queue`
cannot be used from threads. Stages here move items in chunks (one lock round trip for
many items when a stage costs nothing) and an aborted pipeline must wake every waiter at
once, thread or coroutine, so that nothing can block forever. Hence this small class.
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


# A worker whose current call has run this long no longer keeps the items it holds: idle
# peers take the unstarted ones, the next stage takes the finished ones.
STALL_S = 1e-3


class Aborted(Exception):
    """Raised by every blocking operation once the pipeline is being torn down."""


class Hold(Generic[T]):
    """What one worker holds outside the channels while it works through a chunk.

    `todo`: items taken from its input channel and not started yet; `done`: items finished
    and not yet put into its output channel; `since`: when its current call started (0.0
    between calls); `lent`: items handed to a worker process that it may give back
    unstarted. Once a call has run for STALL_S, the channels' getters take `todo` and
    `done` items themselves, so one slow call holds back no item but its own. Both are
    deques: popleft is atomic, so the worker and a thief never get the same item.
    """

    __slots__ = ("todo", "done", "since", "lent")

    def __init__(self) -> None:
        self.todo: deque[T] = deque()
        self.done: deque[T] = deque()
        self.since = 0.0
        self.lent = 0

    def stalled(self, now: float) -> bool:
        since = self.since
        return since > 0.0 and now - since > STALL_S


def drain(items: deque[T], max_n: int = 1 << 30) -> list[T]:
    """Pop up to max_n items from the left of a deque that another thread may also pop."""
    out: list[T] = []
    try:
        while len(out) < max_n:
            out.append(items.popleft())
    except IndexError:
        pass
    return out


def collect_batch(
    inq: Channel[T], first: list[T], max_size: int, wait_s: float
) -> tuple[list[T], bool]:
    """Top up a batch until it is full or its first item waited wait_s; (batch, eof)."""
    items = first
    if len(items) >= max_size or wait_s <= 0:
        return items, False
    deadline = perf_counter() + wait_s
    while len(items) < max_size:
        left = deadline - perf_counter()
        if left <= 0:
            break
        more = inq.get_many(max_size - len(items), timeout=left)
        if more is None:
            return items, True
        items.extend(more)
    return items, False


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class Channel(Generic[T]):
    """Bounded multi-producer, multi-consumer queue with end-of-stream and abort.

    End of stream is reached when every producer has called `producer_done` and the queue
    is empty; getters then receive None. `put_many` waits for room below the capacity and
    then appends the whole chunk, so the depth can exceed the capacity by at most one chunk:
    that keeps a chunk atomic without any partial-put bookkeeping.
    """

    def __init__(self, capacity: int, producers: int, trace: bool = False) -> None:
        self.capacity = capacity
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
        self._not_full = threading.Condition(self._lock)
        self._producers = producers
        self._aborted = False
        self._aget: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._aput: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        # holds of this channel's consumers (their todo) and producers (their done)
        self._takers: list[Hold[T]] = []
        self._givers: list[Hold[T]] = []
        # time-weighted depth: the integral of depth over time, updated on every change
        self._t0 = perf_counter()
        self._t_last = self._t0
        self._area = 0.0
        self.depth_max = 0
        self.depth_trace: list[tuple[float, int]] | None = [] if trace else None

    # -- accounting -----------------------------------------------------------------
    def _changed(self, before: int, now: float) -> None:
        self._area += before * (now - self._t_last)
        self._t_last = now
        depth = len(self._items)
        if depth > self.depth_max:
            self.depth_max = depth
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

    @staticmethod
    def _wake(waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]) -> None:
        for loop, fut in waiters:
            # RuntimeError: that loop is closed, so nobody is waiting on it any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_resolve, fut)
        waiters.clear()

    # -- producer side ----------------------------------------------------------------
    def _append(self, items: Iterable[T]) -> None:
        before = len(self._items)
        self._items.extend(items)
        added = len(self._items) - before
        self._changed(before, perf_counter())
        self._not_empty.notify(added)
        if self._aget:
            self._wake(self._aget)

    def put_many(self, items: list[T]) -> None:
        with self._lock:
            while len(self._items) >= self.capacity and not self._aborted:
                self._not_full.wait()
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
                fut: asyncio.Future[None] = loop.create_future()
                entry = (loop, fut)
                self._aput.append(entry)
            try:
                await fut
            finally:
                self._forget(self._aput, entry)

    def producer_done(self) -> None:
        with self._lock:
            self._producers -= 1
            if self._producers <= 0:
                self._not_empty.notify_all()
                self._wake(self._aget)

    def add_hold(self, hold: Hold[T], consumer: bool) -> None:
        """Register a worker's hold: as a consumer its `todo` comes from here, as a
        producer its `done` goes here; getters take either from a stalled worker."""
        with self._lock:
            (self._takers if consumer else self._givers).append(hold)

    def _rescue(self, max_n: int) -> tuple[list[T], bool]:
        """(items taken from stalled workers' holds, whether any hold still has items)."""
        now = perf_counter()
        got: list[T] = []
        held = False
        for h in self._givers:
            if h.done:
                if h.stalled(now):
                    got += drain(h.done, max_n - len(got))
                held = held or bool(h.done)
        for h in self._takers:
            if h.todo or h.lent:
                if h.todo and h.stalled(now) and len(got) < max_n:
                    got += drain(h.todo, max_n - len(got))
                held = held or bool(h.todo) or h.lent > 0
        return got, held

    # -- consumer side ----------------------------------------------------------------
    def _take(self, max_n: int) -> list[T]:
        items = self._items
        before = len(items)
        if max_n >= before:
            out = list(items)
            items.clear()
        else:
            out = [items.popleft() for _ in range(max_n)]
        self._changed(before, perf_counter())
        self._not_full.notify(len(out))
        if self._aput:
            self._wake(self._aput)
        return out

    def get_many(self, max_n: int, timeout: float | None = None) -> list[T] | None:
        """Up to max_n items; [] when the timeout passed; None at end of stream."""
        with self._lock:
            if not self._items or self._aborted:
                deadline = None if timeout is None else perf_counter() + timeout
                while not self._items:
                    if self._aborted:
                        raise Aborted
                    held = False
                    if self._takers or self._givers:
                        got, held = self._rescue(max_n)
                        if got:
                            return got
                    if self._producers <= 0 and not held:
                        return None
                    # while a worker holds items, look again after STALL_S: nothing
                    # notifies when its call becomes slow
                    wait_s: float | None = STALL_S if held else None
                    if deadline is not None:
                        left = deadline - perf_counter()
                        if left <= 0:
                            return []
                        # a Batch may wait "forever" (inf): wait() takes no more than this
                        left = min(left, threading.TIMEOUT_MAX)
                        wait_s = left if wait_s is None else min(wait_s, left)
                    self._not_empty.wait(wait_s)
                if self._aborted:
                    raise Aborted
            return self._take(max_n)

    async def aget_many(self, max_n: int, timeout: float | None = None) -> list[T] | None:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            with self._lock:
                if self._aborted:
                    raise Aborted
                if self._items:
                    return self._take(max_n)
                held = False
                if self._takers or self._givers:
                    got, held = self._rescue(max_n)
                    if got:
                        return got
                if self._producers <= 0 and not held:
                    return None
                fut: asyncio.Future[None] = loop.create_future()
                entry = (loop, fut)
                self._aget.append(entry)
            try:
                wait_s: float | None = STALL_S if held else None
                if deadline is not None:
                    left = deadline - loop.time()
                    if left <= 0:
                        return []
                    wait_s = left if wait_s is None else min(wait_s, left)
                if wait_s is None:
                    await fut
                else:
                    await asyncio.wait({fut}, timeout=wait_s)
            finally:
                self._forget(self._aget, entry)

    def _forget(
        self,
        waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]],
        entry: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]],
    ) -> None:
        with self._lock, contextlib.suppress(ValueError):
            waiters.remove(entry)

    # -- teardown -----------------------------------------------------------------------
    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            self._not_empty.notify_all()
            self._not_full.notify_all()
            self._wake(self._aget)
            self._wake(self._aput)

    @property
    def aborted(self) -> bool:
        return self._aborted
