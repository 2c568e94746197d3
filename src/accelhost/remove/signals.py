"""Signals: every signal accelhost sends goes out from here, each way with the rule that
keeps a reused pid from being hit.

- `Pinned`: one process by pid and start time, through a pidfd (Linux 5.3+), else with the
  start time read again just before each `kill` (4.19 is common on Ascend hosts).
- `signal_group`: a group the caller vouches for: its own child leads it (the id stays
  reserved while any member lives), or a pinned live target is still in it
  (`signal_pinned_group`).
- `signal_members`: the members of the caller's own cgroup, just listed.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterable

from accelhost.host.base import Host
from accelhost.kernel.libc import open_pidfd
from accelhost.readers.procs import read_process

NOT_PERMITTED = "not permitted to signal it (run as root or as its owner)"


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
        try:
            os.kill(pid, sig)
        except OSError:
            continue
