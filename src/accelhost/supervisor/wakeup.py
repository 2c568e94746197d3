"""The supervisor's one place of sleep: a `poll()` over signals, pidfds and process events.

Signals arrive through `signal.set_wakeup_fd`'s self-pipe and are handled in the loop (a
handler, unlike SIG_DFL, is never discarded by the kernel for PID 1). An event source is
muted for its `batch_s` after each drain: a host that forks a lot costs a few wakeups a
second, not one a fork.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from types import FrameType


def _noop(signum: int, frame: FrameType | None) -> None:
    """The wakeup fd carries the signal to the loop."""


class Waker:
    def __init__(self) -> None:
        self.poller = select.poll()
        self._wake_r = -1
        self._wake_w = -1
        self._saved: dict[int, object] = {}
        self._saved_wakeup = -1
        # event sources read in batches: fd -> (drain, batch seconds); muted ones: fd -> until
        self._sources: dict[int, tuple[Callable[[], None], float]] = {}
        self._muted: dict[int, float] = {}

    def install(self, signals: Iterable[int]) -> None:
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.poller.register(self._wake_r, select.POLLIN)
        for sig in signals:
            self._saved[sig] = signal.signal(sig, _noop)
        self._saved_wakeup = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

    def restore(self) -> None:
        signal.set_wakeup_fd(self._saved_wakeup)
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._saved.clear()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                os.close(fd)
        self._wake_r = self._wake_w = -1

    def add_events(self, fd: int, drain: Callable[[], None], batch_s: float) -> None:
        """A source read whenever it has data, at most once per `batch_s`."""
        self._sources[fd] = (drain, batch_s)
        self.poller.register(fd, select.POLLIN)

    def wait(self, timeout_s: float | None) -> tuple[list[int], list[int]]:
        """Sleep until a signal, a watched fd, or the timeout: (signals, readable fds)."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            for fd, until in list(self._muted.items()):
                if now >= until:
                    self.poller.modify(fd, select.POLLIN)
                    del self._muted[fd]
            wake = [t for t in (end, *self._muted.values()) if t is not None]
            ms = None if not wake else max(0, int((min(wake) - now) * 1000) + 1)
            signals: list[int] = []
            fds: list[int] = []
            for fd, _ in self.poller.poll(ms):
                if fd == self._wake_r:
                    signals.extend(self._signals())
                elif fd in self._sources:
                    drain, batch_s = self._sources[fd]
                    drain()
                    self.poller.modify(fd, 0)
                    self._muted[fd] = time.monotonic() + batch_s
                else:
                    fds.append(fd)
            if signals or fds or (end is not None and time.monotonic() >= end):
                return signals, fds

    def _signals(self) -> list[int]:
        out: list[int] = []
        with contextlib.suppress(BlockingIOError):  # the pipe is drained
            while data := os.read(self._wake_r, 512):
                out.extend(data)
        return out
