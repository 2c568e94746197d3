"""Stopping orphans: SIGTERM, wait, SIGKILL, wait, each process re-identified first.

Every signal is journaled before it is sent; every target is pinned by a pidfd (or checked
by start time on kernels without one) so that a pid reused meanwhile is never signalled.
"""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable

from accelhost.host.live import live_host
from accelhost.hygiene.actions import CleanResult, Outcome, ProcessRef, StopProcesses
from accelhost.hygiene.journal import Journal
from accelhost.hygiene.text import one_line
from accelhost.readers.procs import read_process


def _is_gone(pid: int, start_ticks: int) -> bool:
    """Exited (or a zombie, or the pid now belongs to someone else)."""
    info = read_process(live_host(), pid)
    return info is None or info.is_zombie or info.start_ticks != start_ticks


def _state(pid: int) -> str | None:
    info = read_process(live_host(), pid)
    return None if info is None else info.state


class _Tracked:
    """One target process, re-identified by pid and start time before every signal.

    With a pidfd (Linux 5.3+) the identity is pinned once: signals through it can never
    reach a process that later got the same pid. Older kernels (4.19 is common on Ascend
    hosts) get the same check by start time just before each `kill`; the window left is
    the few microseconds between that check and the signal.
    """

    def __init__(self, ref: ProcessRef) -> None:
        self.ref = ref
        self.fd: int | None = None
        self._by_pid = False
        self._gone = False
        # Why a signal could not be sent (EPERM: another user's process, no CAP_KILL).
        self.denied: str | None = None
        try:
            self.fd = os.pidfd_open(ref.pid)
        except ProcessLookupError:
            self._gone = True
            return
        except (OSError, AttributeError):
            self._by_pid = True  # no pidfd on this kernel
        # The pid names whatever has it now: check it is the process we planned.
        if _is_gone(ref.pid, ref.start_ticks):
            self._gone = True
            self.close()

    @property
    def alive(self) -> bool:
        if self._gone:
            return False
        if self._by_pid:
            self._gone = _is_gone(self.ref.pid, self.ref.start_ticks)
            return not self._gone
        if self.fd is None:
            return False
        return not select.select([self.fd], [], [], 0)[0]

    def send(self, sig: int) -> None:
        if self._gone:
            return
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif self._by_pid and not _is_gone(self.ref.pid, self.ref.start_ticks):
                os.kill(self.ref.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            self.denied = "not permitted to signal it (run as root or as its owner)"

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _group_still_ours(pgid: int, tracked: list[_Tracked]) -> bool:
    for t in tracked:
        if not t.alive:
            continue
        info = read_process(live_host(), t.ref.pid)
        if info is not None and info.pgid == pgid and info.start_ticks == t.ref.start_ticks:
            return True
    return False


def _wait(tracked: list[_Tracked], grace_s: float, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + grace_s
    while any(t.alive for t in tracked) and time.monotonic() < deadline:
        sleep(0.05)


def stop_all(
    stops: list[StopProcesses],
    grace_s: float,
    journal: Journal,
    result: CleanResult,
    say: Callable[[str], None],
    sleep: Callable[[float], None],
) -> None:
    tracked: dict[int, list[_Tracked]] = {}
    for n, act in enumerate(stops):
        tracked[n] = [_Tracked(t) for t in act.targets]
    try:
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
            sent = False
            for n, act in enumerate(stops):
                live = [t for t in tracked[n] if t.alive]
                if not live:
                    continue
                journal.write(
                    "intent",
                    action="signal",
                    signal=name,
                    pgid=act.pgid if act.signal_group else None,
                    pids=[t.ref.pid for t in live],
                    cmdlines=[one_line(t.ref.cmdline, 300) for t in live],
                    reason=act.reason,
                )
                # The group id is reserved while any member lives; a tracked (pidfd-verified)
                # member still in the group proves it is the same group, not a new one.
                if act.signal_group and _group_still_ours(act.pgid, tracked[n]):
                    try:
                        os.killpg(act.pgid, sig)
                    except ProcessLookupError:
                        pass
                    except PermissionError as exc:
                        say(f"  killpg({act.pgid}, {name}): {exc.strerror}")
                for t in live:
                    t.send(sig)
                    if t.denied:
                        say(f"  pid {t.ref.pid}: {t.denied}")
                sent = True
                say(
                    f"  {name} -> {'group ' + str(act.pgid) + ', ' if act.signal_group else ''}"
                    f"pids {' '.join(str(t.ref.pid) for t in live)}"
                )
            if sent:
                _wait([t for ts in tracked.values() for t in ts], grace_s, sleep)
        for ts in tracked.values():
            for t in ts:
                target = f"pid {t.ref.pid}"
                if not t.alive:
                    outcome = Outcome("stop", target, "gone", True)
                elif t.denied:
                    outcome = Outcome("stop", target, t.denied, False)
                else:
                    state = _state(t.ref.pid)
                    if state == "D":
                        outcome = Outcome(
                            "stop",
                            target,
                            "in D state (uninterruptible): not retried; it needs a device "
                            "reset (npu-smi set -t reset -i N / nvidia-smi -r -i N)",
                            False,
                        )
                    else:
                        outcome = Outcome("stop", target, "still alive after SIGKILL", False)
                journal.write("outcome", action="stop", pid=t.ref.pid, result=outcome.result)
                result.outcomes.append(outcome)
    finally:
        for ts in tracked.values():
            for t in ts:
                t.close()
