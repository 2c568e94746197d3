"""The supervisor's one place of sleep: a `poll()` over signals, pidfds and process events.

Signal handlers only have to exist: `signal.set_wakeup_fd` writes each signal's number to
a self-pipe that the poll watches, so signals are handled in the loop, never inside a
handler (and a handler, unlike SIG_DFL, is never discarded by the kernel for PID 1).
Process events are read here in batches: after a drain their socket is muted for
`batch_s`, so a host that forks a lot costs a few wakeups a second, not one a fork.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from types import FrameType


def _noop(signum: int, frame: FrameType | None) -> None:
    """See the module's docstring: the wakeup fd carries the signal to the loop."""


class Waker:
    def __init__(self) -> None:
        self.poller = select.poll()
        self._wake_r = -1
        self._wake_w = -1
        self._saved: dict[int, object] = {}
        self._saved_wakeup = -1
        self._events_fd: int | None = None
        self._events_drain: Callable[[], None] | None = None
        self._batch_s = 0.0
        self._muted_until: float | None = None

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
        self._events_fd, self._events_drain, self._batch_s = fd, drain, batch_s
        self.poller.register(fd, select.POLLIN)

    def watch(self, fd: int) -> None:
        self.poller.register(fd, select.POLLIN)

    def unwatch(self, fd: int) -> None:
        self.poller.unregister(fd)

    def wait(self, timeout_s: float | None) -> tuple[list[int], list[int]]:
        """Sleep until a signal, a watched fd, or the timeout: (signals, readable fds)."""
        end = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            muted = self._muted_until
            if muted is not None and now >= muted:
                self.poller.modify(self._events_fd, select.POLLIN)  # type: ignore[arg-type]
                self._muted_until = muted = None
            wake = [t for t in (end, muted) if t is not None]
            ms = None if not wake else max(0, int((min(wake) - now) * 1000) + 1)
            signals: list[int] = []
            fds: list[int] = []
            for fd, _ in self.poller.poll(ms):
                if fd == self._wake_r:
                    signals.extend(self._signals())
                elif fd == self._events_fd and self._events_drain is not None:
                    self._events_drain()
                    self.poller.modify(fd, 0)
                    self._muted_until = time.monotonic() + self._batch_s
                else:
                    fds.append(fd)
            if signals or fds or (end is not None and time.monotonic() >= end):
                return signals, fds

    def _signals(self) -> list[int]:
        out: list[int] = []
        while True:
            try:
                data = os.read(self._wake_r, 512)
            except BlockingIOError:
                return out
            if not data:
                return out
            out.extend(data)
