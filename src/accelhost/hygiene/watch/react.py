"""`watch` reacts at once: the exit of an engine process or of a holder of an engine's
shared-memory file starts a round within a second, instead of at the next `--interval`;
a new engine-named file in a shm dir (inotify) is judged when it reaches --shm-min-age.

The kernel's process events (`accelhost.kernel.procevents.ProcEvents`, the listener
`run` uses too) are subscribed to execs and exits, and a classic BPF socket filter drops in
the kernel every fork and every exit but those of the pids this round cares about (set by
`watch` after each round): a fork-heavy neighbour costs the watch no wakeup. An exec whose
new command line is an engine's adds its pid to the set at once: an engine born and killed
between two rounds (a crash during start-up, each crash of a crash loop) is seen when it
dies, not at the next `--interval`.

Where the kernel gives no events (not root, not the host's PID namespace) or inotify
cannot be had (its limits), or a queue overflowed (events lost), the watch says so once in
its log and in `accelhost_watch_fallback{source="process_events"|"inotify"}`; rounds then
come at `--interval`, and after a loss the next round reads the whole host (an exit or a
file it missed is seen there).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from accelhost.host.live import live_host
from accelhost.kernel.inotify import CreationWatch
from accelhost.kernel.procevents import (
    PROC_EVENT_EXEC,
    PROC_EVENT_EXIT,
    ProcEvents,
    attach,
    exit_filter,
)
from accelhost.readers.procs import hears_process_events, read_process

# How long to let an exit settle (its children re-parented, its siblings killed) before
# the round that judges what it left.
SETTLE_S = 0.2
# Wake this often to see a stop request (select cannot wait on a threading.Event).
POLL_S = 0.5
# More pids than this: the filter passes every exit and user space picks (a BPF program
# has at most 4096 instructions).
MAX_FILTER_PIDS = 1000
_LOST = {
    "process_events": "process events lost (socket overflow): the next round reads all",
    "inotify": "inotify events lost (queue overflow): the next round reads all",
}


@dataclass(frozen=True)
class WakeUp:
    """Why the wait ended early: processes that exited, engine files that appeared, or a
    loss of events (then the next round must read everything)."""

    exited: tuple[int, ...] = ()
    new_files: tuple[str, ...] = ()
    lost: bool = False


@dataclass
class Reactor:
    """Wakes the watch when a watched process exits; None-safe fallbacks when it cannot."""

    log: Callable[[dict[str, Any]], None]
    degraded: Callable[[str, str], None]
    events: ProcEvents | None = None
    files: CreationWatch | None = None
    # which new file names matter (engine-named ones): others do not wake the watch
    named: Callable[[str], bool] = field(default=lambda _n: False, repr=False)
    # which command lines are an engine's: a process exec'd into one is watched at once
    engine: Callable[[str], bool] = field(default=lambda _c: False, repr=False)
    watched: frozenset[int] = frozenset()
    lost_said: set[str] = field(default_factory=set)  # sources whose loss was said
    _filtered: frozenset[int] | None = field(default=None, repr=False)

    @classmethod
    def open(
        cls,
        log: Callable[[dict[str, Any]], None],
        degraded: Callable[[str, str], None],
        shm_dirs: Iterable[str] = (),
        named: Callable[[str], bool] = lambda _n: False,
        engine: Callable[[str], bool] = lambda _c: False,
    ) -> Reactor:
        kinds = PROC_EVENT_EXIT | PROC_EVENT_EXEC
        events = ProcEvents.open(kinds) if hears_process_events(live_host()) else None
        reactor = cls(log, degraded, events, named=named, engine=engine)
        try:
            reactor.files = CreationWatch.open(shm_dirs)
        except OSError as exc:  # no inotify, or its limits reached
            reactor._fall_back(
                "inotify",
                f"no inotify on the shm dirs ({exc.strerror or exc}): a new engine file is "
                "judged at the round after it reaches --shm-min-age",
            )
        if reactor.events is None:
            reactor._fall_back(
                "process_events",
                "no process events (needs root with CAP_NET_ADMIN in the host's PID "
                "namespace): an engine's death is judged at the next --interval",
            )
        else:
            reactor.watch(())
        return reactor

    def _fall_back(self, source: str, why: str) -> None:
        self.log({"event": "fallback", "source": source, "reason": why})
        self.degraded(source, why)

    def watch(self, pids: Iterable[int]) -> None:
        """Exits of these pids wake the watch (the filter is rebuilt when they change)."""
        self.watched = frozenset(pids)
        if self.events is None or self.watched == self._filtered:
            return
        many = len(self.watched) > MAX_FILTER_PIDS
        program = exit_filter(None if many else self.watched, execs=True)
        with contextlib.suppress(OSError):  # no filter: user space picks the exits it wants
            attach(self.events.sock, program)
        self._filtered = self.watched

    def wait(self, stop: threading.Event, until: float) -> WakeUp | None:
        """Wait until `until` (monotonic) or a stop (None), or until a watched pid exits
        or an engine file appears (a `WakeUp`)."""
        sources = [s for s in (self.events, self.files) if s is not None]
        while not stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return None
            if not sources:
                stop.wait(min(left, POLL_S))
                continue
            select.select(sources, [], [], min(left, POLL_S))
            paths = self.files.read() if self.files is not None else []
            new = tuple(n for n in map(os.path.basename, paths or ()) if self.named(n))
            exited = self._exits() if self.events is not None else []
            lost = {"inotify"} if paths is None else set()
            if self.events is not None and self.events.lost:
                self.events.lost = False
                lost.add("process_events")
            if lost:
                for source in sorted(lost - self.lost_said):
                    self.lost_said.add(source)
                    self._fall_back(source, _LOST[source])
                return WakeUp(lost=True)
            if exited:
                time.sleep(SETTLE_S)
                return WakeUp(tuple(sorted(set(exited) | set(self._exits()))), new)
            if new:
                return WakeUp(new_files=new)
        return None

    def _exits(self) -> list[int]:
        """Exits of watched pids; an exec into an engine's command line is watched from
        now on (its exit in the same batch counts)."""
        assert self.events is not None
        out = []
        for what, ints in self.events.read():
            if what == PROC_EVENT_EXEC and ints[0] == ints[1]:
                proc = read_process(live_host(), ints[1])
                if proc is not None and proc.cmdline and self.engine(proc.command):
                    self.watch(self.watched | {ints[1]})
            elif what == PROC_EVENT_EXIT and ints[0] == ints[1] and ints[1] in self.watched:
                out.append(ints[1])
        return out

    def close(self) -> None:
        if self.events is not None:
            with contextlib.suppress(OSError):
                self.events.close()
            self.events = None
        if self.files is not None:
            self.files.close()
            self.files = None
