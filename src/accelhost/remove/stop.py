"""The one stop loop of `clean` and `run`: SIGTERM, a grace, SIGKILL, a bounded wait, and
what outlives that reported, not retried (in D state it sits in a driver).

Each target is pinned (`signals.Pinned`) when first seen, so no signal reaches a process
that reused its pid. `targets` is asked again while waiting (at least every `RESCAN_S`),
so processes forked meanwhile get the signal too. The caller says how a signal goes out
(`send`: its journal first, a group or a cgroup killed too) and where the loop sleeps
(`poller`, `wait`: `run` forwards the signals it gets meanwhile).
"""

from __future__ import annotations

import select
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from accelhost.host.base import Host
from accelhost.readers.procs import ProcessInfo
from accelhost.remove.signals import Pinned

RESCAN_S = 0.25  # while waiting, look at the targets again at least this often
D_STATE = (
    "in D state (uninterruptible sleep in a driver): not retried; it needs a device "
    "reset (npu-smi set -t reset -i N / nvidia-smi -r -i N)"
)


def send_each(sig: int, pins: list[Pinned]) -> list[int]:
    """Deliver `sig` to each pinned process: the pids it reached."""
    return [p.pid for p in pins if p.send(sig)]


@dataclass
class StopLoop:
    """One stop of a set of processes (`run` it once); what it did stays readable."""

    host: Host
    targets: Callable[[], Mapping[int, ProcessInfo]]  # the live processes to stop, now
    send: Callable[[int, list[Pinned]], list[int]] = send_each
    spare: Callable[[ProcessInfo], bool] = lambda _i: False  # had its SIGTERM already
    log: Callable[[str], None] = lambda _line: None
    poller: select.poll = field(default_factory=select.poll)  # where each pidfd is registered
    wait: Callable[[float], list[int]] | None = None  # sleep there: the readable fds
    members: dict[int, Pinned] = field(default_factory=dict)
    gone: set[int] = field(default_factory=set)
    terminated: list[int] = field(default_factory=list)  # pids SIGTERM reached
    killed: list[int] = field(default_factory=list)  # pids SIGKILL reached

    def run(self, grace_s: float, kill_wait_s: float) -> dict[int, ProcessInfo]:
        """Stop them all; the ones still there at the end (by a last look at `targets`)."""
        grace_end = time.monotonic() + grace_s
        try:
            self._sweep(signal.SIGTERM, self.terminated)
            if self.members and grace_s > 0:
                self.log(f"stopping {len(self.members)} process(es); SIGKILL in {grace_s:g} s")
            self._settle(grace_end, signal.SIGTERM, self.terminated)
            self._sweep(signal.SIGKILL, self.killed, again=True)
            if self.killed:
                self.log(
                    f"sent SIGKILL to {len(self.killed)} process(es) still alive "
                    f"after {grace_s:g} s"
                )
            if not self.gone >= set(self.members):
                self._settle(time.monotonic() + kill_wait_s, signal.SIGKILL, self.killed)
            return dict(sorted(self.targets().items()))
        finally:
            for pin in self.members.values():
                self._release(pin)

    def _release(self, pin: Pinned) -> None:
        """Let its pidfd go (a readable one would wake every poll from now on)."""
        if pin.fd is not None:
            self.poller.unregister(pin.fd)
            pin.close()

    def _sweep(self, sig: int, sent: list[int], again: bool = False) -> None:
        """Pin the targets not yet pinned and send them `sig` (every member not gone, with
        `again`); note which members are gone."""
        now = self.targets()
        due: list[Pinned] = []
        for pid, info in now.items():
            pin = self.members.get(pid)
            if pin is not None and pin.start_ticks != info.start_ticks:
                self._release(pin)  # the pid is another process's now
                self.gone.discard(pid)
                pin = None
            if pin is None:
                pin = Pinned(self.host, pid, info.start_ticks)
                if not pin.alive:
                    continue  # exited between the look and the pin
                self.members[pid] = pin
                if pin.fd is not None:
                    self.poller.register(pin.fd, select.POLLIN)
                if not (sig == signal.SIGTERM and self.spare(info)):
                    due.append(pin)
            elif again and pid not in self.gone:
                due.append(pin)
        if due:
            sent += [pid for pid in self.send(sig, due) if pid not in sent]
        for pid, pin in self.members.items():
            cur = now.get(pid)
            if cur is None or cur.start_ticks != pin.start_ticks or not pin.alive:
                self.gone.add(pid)

    def _settle(self, until: float, sig: int, sent: list[int]) -> None:
        """Wait until every member is gone or `until` passes; newcomers get `sig` too."""
        wait = self.wait or (lambda s: [fd for fd, _ in self.poller.poll(s * 1000)])
        last = time.monotonic()
        while (now := time.monotonic()) < until:
            waiting = [p for pid, p in self.members.items() if pid not in self.gone]
            # due for a look, or no pidfd that would wake us: look now
            if now >= last + RESCAN_S or all(p.fd is None for p in waiting):
                self._sweep(sig, sent)
                last = time.monotonic()
                if self.gone >= set(self.members):
                    return
            exited = set(wait(max(0.0, min(until, last + RESCAN_S) - time.monotonic())))
            for pid, pin in self.members.items():
                if pin.fd is not None and pin.fd in exited:
                    self.gone.add(pid)
                    self._release(pin)
