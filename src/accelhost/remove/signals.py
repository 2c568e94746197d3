"""Signals: every signal accelhost sends goes out from here, each way with the rule that
keeps a reused pid from being hit.

- `Pinned`: one process by pid and start time, through a pidfd (Linux 5.3+), else with the
  start time read again just before each `kill` (4.19 is common on Ascend hosts).
- `signal_group`: a group the caller vouches for: its own child leads it (the id stays
  reserved while any member lives), or a pinned live target is still in it
  (`signal_pinned_group`).
- `signal_members`: the members of the caller's own cgroup, just listed.

`StopLoop`, the one stop loop of `clean` and `run`: SIGTERM, a grace, SIGKILL, a bounded
wait, and what outlives that reported, not retried (in D state it sits in a driver). Each
target is pinned when first seen, so no signal reaches a process that reused its pid.
`targets` is asked again while waiting (at least every `RESCAN_S`), so processes forked
meanwhile get the signal too. The caller says how a signal goes out (`send`: its journal
first, a group or a cgroup killed too) and where the loop sleeps (`poller`, `wait`: `run`
forwards the signals it gets meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from accelhost.host.base import Host
from accelhost.kernel.libc import open_pidfd
from accelhost.readers.procs import ProcessInfo, read_process

NOT_PERMITTED = "not permitted to signal it (run as root or as its owner)"
RESCAN_S = 0.25  # while waiting, look at the targets again at least this often
D_STATE = (
    "in D state (uninterruptible sleep in a driver): not retried; it needs a device "
    "reset (npu-smi set -t reset -i N / nvidia-smi -r -i N)"
)


def signal_name(sig: int) -> str:
    """SIGTERM for 15; a number this Python has no name for stays a number."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


class Pinned:
    """One target process, re-identified by pid and start time before every signal."""

    def __init__(self, host: Host, pid: int, start_ticks: int) -> None:
        self.host = host
        self.pid = pid
        self.start_ticks = start_ticks
        self.denied: str | None = None  # why a signal could not be sent (EPERM)
        # readable once the process has exited; None: gone, or no pidfd on this kernel
        self.fd = open_pidfd(pid)
        self._by_pid = self.fd is None
        # The pid names whatever has it now: check it is the process we planned.
        self._gone = self._changed()
        if self._gone:
            self.close()

    def _changed(self) -> bool:
        """Exited (or a zombie, or the pid now belongs to someone else)."""
        info = read_process(self.host, self.pid, cmdline=False)
        return info is None or info.is_zombie or info.start_ticks != self.start_ticks

    @property
    def alive(self) -> bool:
        if self._gone:
            return False
        if self._by_pid:
            self._gone = self._changed()
            return not self._gone
        if self.fd is None:
            return False
        return not select.select([self.fd], [], [], 0)[0]

    def send(self, sig: int) -> bool:
        """Deliver `sig` to this very process; False when it is gone or refused."""
        if self._gone:
            return False
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif self._by_pid and not self._changed():
                os.kill(self.pid, sig)
            else:
                return False
        except ProcessLookupError:
            return False
        except PermissionError:
            self.denied = NOT_PERMITTED
            return False
        return True

    def close(self) -> None:
        """Let the pidfd go; the process then counts as gone to this object."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def signal_group(pgid: int, sig: int) -> OSError | None:
    """killpg of a group the caller vouches for (see the module docstring); the error, if
    any (ESRCH: the group is gone; EPERM: a member is not ours to signal)."""
    try:
        os.killpg(pgid, sig)
    except OSError as exc:
        return exc
    return None


def signal_pinned_group(pgid: int, members: Iterable[Pinned], sig: int) -> OSError | None:
    """killpg, if a pinned member is still alive in the group (the id is reserved while it
    lives, so it proves the group is the same); None, nothing sent, when none is."""
    for m in members:
        if not m.alive:
            continue
        info = read_process(m.host, m.pid, cmdline=False)
        if info is not None and info.pgid == pgid and info.start_ticks == m.start_ticks:
            return signal_group(pgid, sig)
    return None


def signal_members(pids: Iterable[int], sig: int) -> None:
    """Signal the members of the caller's own cgroup, just listed (frozen where the freezer
    allows, so no pid can be freed and reused before the signal lands)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


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
