"""Stopping the whole tree: SIGTERM, a bounded grace, SIGKILL, a bounded wait.

What is left after `kill_wait_s` (uninterruptible sleep in a driver) is reported, not
waited for. Members are pinned (`remove.signals.Pinned`), so a signal never reaches a
process that reused a dead member's pid; the tree is rescanned while waiting, so forks
made meanwhile are caught too. The supervisor hands over a `Tree`: plain values and the
few calls only the owner can make (reap and scan, its poll, its cgroup).
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass

from accelhost.host.base import Host
from accelhost.readers.procs import ProcessInfo
from accelhost.remove.signals import Pinned
from accelhost.supervisor.options import RunOutcome

# While tearing down, look at /proc again at least this often for processes forked meanwhile.
TEARDOWN_RESCAN_S = 0.25


def alive_only(tree: dict[int, ProcessInfo]) -> dict[int, ProcessInfo]:
    return {pid: i for pid, i in tree.items() if i.state not in ("Z", "X")}


@dataclass(frozen=True)
class Tree:
    host: Host
    cmd_pid: int | None  # its group got the forwarded stop signal already
    grace_s: float
    kill_wait_s: float
    log: Callable[[str], None]
    warn: Callable[[str], None]
    live: Callable[[], dict[int, ProcessInfo]]  # reap what exited, then the live tree
    # sleep until a watched pidfd is readable or the timeout passes: the readable fds
    # (signals that come meanwhile are the owner's to forward)
    wait: Callable[[float], list[int]]
    watch: Callable[[int], None]  # add a pidfd to the owner's poll
    unwatch: Callable[[int], None]
    kill_all: Callable[[], None] | None = None  # the cgroup's one SIGKILL to every member


@dataclass
class _Member:
    info: ProcessInfo
    pin: Pinned
    gone: bool = False


def tear_down(tree: Tree, outcome: RunOutcome) -> None:
    """SIGTERM, grace, SIGKILL, bounded wait; fills the outcome's pid lists."""
    _Teardown(tree).run(outcome)


class _Teardown:
    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.members: dict[int, _Member] = {}

    def run(self, outcome: RunOutcome) -> None:
        tree = self.tree
        group_signalled = outcome.reason == "signal"
        grace_end = time.monotonic() + tree.grace_s
        try:
            self._sweep(signal.SIGTERM, outcome.terminated, skip_group=group_signalled)
            if self.members and tree.grace_s > 0:
                tree.log(f"stopping {len(self.members)} process(es); SIGKILL in {tree.grace_s:g} s")
            self._settle(grace_end, signal.SIGTERM, outcome.terminated)
            if any(not m.gone for m in self.members.values()) or tree.live():
                if tree.kill_all is not None:
                    tree.kill_all()
                self._sweep(signal.SIGKILL, outcome.killed, again=True)
                if outcome.killed:
                    tree.log(
                        f"sent SIGKILL to {len(outcome.killed)} process(es) still alive "
                        f"after {tree.grace_s:g} s"
                    )
                self._settle(time.monotonic() + tree.kill_wait_s, signal.SIGKILL, outcome.killed)
            for pid, info in sorted(tree.live().items()):
                outcome.survivors.append(pid)
                hint = (
                    " (uninterruptible sleep in a driver: only a device reset frees it)"
                    if info.state == "D"
                    else ""
                )
                tree.warn(f"pid {pid} ({info.comm}) survived SIGKILL, state {info.state}{hint}")
        finally:
            for m in self.members.values():
                self._release(m)

    def _release(self, m: _Member) -> None:
        if m.pin.fd is not None:
            with contextlib.suppress(KeyError):
                self.tree.unwatch(m.pin.fd)
            m.pin.close()

    def _sweep(
        self, sig: int, sent: list[int], skip_group: bool = False, again: bool = False
    ) -> None:
        """Signal every live member of the tree that has not had `sig` yet (all of them
        again with `again`). Members of the command's group already got the forwarded
        signal when `skip_group` is set; a second SIGTERM would cut their shutdown short."""
        members = self.members
        now = self.tree.live()
        for pid, info in now.items():
            m = members.get(pid)
            if m is not None and m.info.start_ticks != info.start_ticks:
                self._release(m)  # the pid is another process's now
                m = None
            if m is None:
                pin = Pinned(self.tree.host, pid, info.start_ticks)
                if not pin.alive:
                    continue  # exited between the scan and the pin
                m = members[pid] = _Member(info, pin)
                if pin.fd is not None:
                    self.tree.watch(pin.fd)
                if skip_group and sig == signal.SIGTERM and info.pgid == self.tree.cmd_pid:
                    continue
            elif not again or m.gone:
                continue
            if m.pin.send(sig) and pid not in sent:
                sent.append(pid)
        for pid, m in members.items():
            cur = now.get(pid)
            if cur is None or cur.start_ticks != m.info.start_ticks:
                m.gone = True

    def _settle(self, until: float, sig: int, sent: list[int]) -> None:
        """Wait until every member is gone (and no new one appeared) or `until` passes;
        newcomers found by the periodic rescan get `sig` too."""
        members = self.members
        last_scan = time.monotonic()
        while True:
            now = time.monotonic()
            if now >= until:
                return
            rescan_due = last_scan + TEARDOWN_RESCAN_S
            # nothing pending, or no pidfd that would wake us: look now
            if now >= rescan_due or all(m.pin.fd is None for m in members.values() if not m.gone):
                self._sweep(sig, sent)
                last_scan = time.monotonic()
                if all(m.gone for m in members.values()):
                    return
                rescan_due = last_scan + TEARDOWN_RESCAN_S
            fds = self.tree.wait(max(0.0, min(until, rescan_due) - time.monotonic()))
            by_fd = {m.pin.fd: m for m in members.values() if m.pin.fd is not None}
            for fd in fds:
                m = by_fd.get(fd)
                if m is not None:
                    m.gone = True
                    self._release(m)
