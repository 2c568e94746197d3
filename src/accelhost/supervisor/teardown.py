"""Stopping the whole tree: SIGTERM, a bounded grace, SIGKILL, a bounded wait.

Whatever is left after `kill_wait_s` sits in an uninterruptible sleep in a driver and is
reported, not waited for. Members are pinned by pidfds where the kernel has them, so a
signal never reaches a process that reused a dead member's pid; the tree is rescanned
while waiting, so processes forked meanwhile are caught too.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from accelhost.readers.procs import ProcessInfo
from accelhost.supervisor.kernel import open_pidfd, send_signal
from accelhost.supervisor.options import RunOutcome
from accelhost.supervisor.tree import still_same

if TYPE_CHECKING:
    from accelhost.host.base import Host
    from accelhost.supervisor.cgroup import Cgroup
    from accelhost.supervisor.options import SupervisorOptions


class _CmdState(Protocol):
    @property
    def cmd_pid(self) -> int | None: ...


class TreeOwner(Protocol):
    """What a teardown needs of the supervisor that owns the tree.

    Written as a protocol so that this module does not import `supervise` (which imports
    it): the supervisor satisfies it structurally.
    """

    @property
    def opts(self) -> SupervisorOptions: ...
    @property
    def host(self) -> Host: ...
    @property
    def cgroup(self) -> Cgroup | None: ...
    @property
    def poller(self) -> select.poll: ...
    @property
    def st(self) -> _CmdState: ...

    def _reap(self) -> None: ...
    def _scan(self, cheap: bool = False) -> dict[int, ProcessInfo]: ...
    def _wait(self, timeout_s: float | None) -> tuple[list[int], list[int]]: ...
    def _forward(self, sig: int) -> None: ...


# While tearing down, look at /proc again at least this often for processes forked meanwhile.
TEARDOWN_RESCAN_S = 0.25


def alive_only(tree: dict[int, ProcessInfo]) -> dict[int, ProcessInfo]:
    return {pid: i for pid, i in tree.items() if i.state not in ("Z", "X")}


@dataclass
class _Member:
    """A process of the tree being torn down, pinned by a pidfd where the kernel has them."""

    info: ProcessInfo
    pidfd: int | None
    gone: bool = False


class Teardown:
    def __init__(self, sup: TreeOwner) -> None:
        self.sup = sup

    def run(self, outcome: RunOutcome) -> None:
        """SIGTERM, grace, SIGKILL, bounded wait; fills the outcome's pid lists."""
        members: dict[int, _Member] = {}
        group_signalled = outcome.reason == "signal"
        grace_end = time.monotonic() + self.sup.opts.grace_s
        try:
            self._sweep(members, signal.SIGTERM, outcome.terminated, skip_group=group_signalled)
            if members and self.sup.opts.grace_s > 0:
                self.sup.opts.log(
                    f"stopping {len(members)} process(es); SIGKILL in {self.sup.opts.grace_s:g} s"
                )
            self._settle(members, grace_end, signal.SIGTERM, outcome.terminated)
            if any(not m.gone for m in members.values()) or self._scan_alive():
                if self.sup.cgroup is not None:
                    self.sup.cgroup.kill_all()
                self._sweep(members, signal.SIGKILL, outcome.killed, again=True)
                if outcome.killed:
                    self.sup.opts.log(
                        f"sent SIGKILL to {len(outcome.killed)} process(es) still alive "
                        f"after {self.sup.opts.grace_s:g} s"
                    )
                kill_end = time.monotonic() + self.sup.opts.kill_wait_s
                self._settle(members, kill_end, signal.SIGKILL, outcome.killed)
            self.sup._reap()
            left = alive_only(self.sup._scan())
            for pid, info in sorted(left.items()):
                outcome.survivors.append(pid)
                hint = (
                    " (uninterruptible sleep in a driver: only a device reset frees it)"
                    if info.state == "D"
                    else ""
                )
                self.sup.opts.warn(
                    f"pid {pid} ({info.comm}) survived SIGKILL, state {info.state}{hint}"
                )
        finally:
            for m in members.values():
                if m.pidfd is not None:
                    with contextlib.suppress(KeyError):
                        self.sup.poller.unregister(m.pidfd)
                    os.close(m.pidfd)

    def _scan_alive(self) -> bool:
        self.sup._reap()
        return bool(alive_only(self.sup._scan()))

    def _sweep(
        self,
        members: dict[int, _Member],
        sig: int,
        sent: list[int],
        skip_group: bool = False,
        again: bool = False,
    ) -> dict[int, ProcessInfo]:
        """Signal every live member of the tree that has not had `sig` yet (all of them
        again with `again`). Members of the command's group already got the forwarded
        signal when `skip_group` is set; a second SIGTERM would cut their shutdown short."""
        self.sup._reap()
        tree = alive_only(self.sup._scan())
        for pid, info in tree.items():
            m = members.get(pid)
            if m is not None and m.info.start_ticks != info.start_ticks:
                if m.pidfd is not None:
                    self.sup.poller.unregister(m.pidfd)
                    os.close(m.pidfd)
                m = None
            if m is None:
                fd = open_pidfd(pid)
                if fd is not None and not still_same(self.sup.host, info):
                    os.close(fd)
                    continue
                m = _Member(info, fd)
                members[pid] = m
                if fd is not None:
                    self.sup.poller.register(fd, select.POLLIN)
                if skip_group and sig == signal.SIGTERM and info.pgid == self.sup.st.cmd_pid:
                    continue
            elif not again or m.gone:
                continue
            if send_signal(pid, sig, m.pidfd) and pid not in sent:
                sent.append(pid)
        for pid, m in members.items():
            cur = tree.get(pid)
            if cur is None or cur.start_ticks != m.info.start_ticks:
                m.gone = True
        return tree

    def _settle(self, members: dict[int, _Member], until: float, sig: int, sent: list[int]) -> None:
        """Wait until every member is gone (and no new one appeared) or `until` passes;
        newcomers found by the periodic rescan get `sig` too."""
        last_scan = time.monotonic()
        while True:
            pending = [m for m in members.values() if not m.gone]
            now = time.monotonic()
            if now >= until:
                return
            rescan_due = last_scan + TEARDOWN_RESCAN_S
            if not pending or all(m.pidfd is None for m in pending) or now >= rescan_due:
                self._sweep(members, sig, sent)
                last_scan = time.monotonic()
                pending = [m for m in members.values() if not m.gone]
                if not pending:
                    return
                rescan_due = last_scan + TEARDOWN_RESCAN_S
            timeout = min(until, rescan_due) - time.monotonic()
            signals, fds = self.sup._wait(max(0.0, timeout))
            self.sup._reap()
            for sig_in in signals:
                if sig_in != signal.SIGCHLD:
                    self.sup._forward(sig_in)
            by_fd = {m.pidfd: m for m in members.values() if m.pidfd is not None}
            for fd in fds:
                m = by_fd.get(fd)
                if m is not None:
                    m.gone = True
                    self.sup.poller.unregister(fd)
                    os.close(fd)
                    m.pidfd = None
