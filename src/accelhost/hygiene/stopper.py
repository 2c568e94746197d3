"""Stopping orphans: SIGTERM, wait, SIGKILL, wait, each process re-identified first.

Every signal is journaled before it is sent; every target is pinned by
`accelhost.remove.signals.Pinned` (a pidfd, or its start time on kernels without one), so
a pid reused meanwhile is never signalled, and a group only while a pinned member is
still in it.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from accelhost.host.live import live_host
from accelhost.hygiene.actions import CleanResult, Outcome, StopProcesses
from accelhost.hygiene.journal import Journal
from accelhost.hygiene.text import one_line
from accelhost.readers.procs import read_process
from accelhost.remove.signals import Pinned, signal_pinned_group

D_STATE = (
    "in D state (uninterruptible): not retried; it needs a device "
    "reset (npu-smi set -t reset -i N / nvidia-smi -r -i N)"
)


def _state(pid: int) -> str | None:
    info = read_process(live_host(), pid, cmdline=False)
    return None if info is None else info.state


def _wait(pinned: list[Pinned], grace_s: float, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + grace_s
    while any(p.alive for p in pinned) and time.monotonic() < deadline:
        sleep(0.05)


def _outcome(p: Pinned) -> Outcome:
    target = f"pid {p.pid}"
    if not p.alive:
        return Outcome("stop", target, "gone", True)
    if p.denied:
        return Outcome("stop", target, p.denied, False)
    if _state(p.pid) == "D":
        return Outcome("stop", target, D_STATE, False)
    return Outcome("stop", target, "still alive after SIGKILL", False)


def stop_all(
    stops: list[StopProcesses],
    grace_s: float,
    journal: Journal,
    result: CleanResult,
    say: Callable[[str], None],
    sleep: Callable[[float], None],
) -> None:
    host = live_host()
    pinned = [[Pinned(host, t.pid, t.start_ticks) for t in act.targets] for act in stops]
    cmdlines = {t.pid: t.cmdline for act in stops for t in act.targets}
    try:
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
            sent = False
            for act, members in zip(stops, pinned, strict=True):
                live = [p for p in members if p.alive]
                if not live:
                    continue
                journal.write(
                    "intent",
                    action="signal",
                    signal=name,
                    pgid=act.pgid if act.signal_group else None,
                    pids=[p.pid for p in live],
                    cmdlines=[one_line(cmdlines[p.pid], 300) for p in live],
                    reason=act.reason,
                )
                if act.signal_group:
                    err = signal_pinned_group(act.pgid, members, sig)
                    if isinstance(err, PermissionError):
                        say(f"  killpg({act.pgid}, {name}): {err.strerror}")
                for p in live:
                    p.send(sig)
                    if p.denied:
                        say(f"  pid {p.pid}: {p.denied}")
                sent = True
                say(
                    f"  {name} -> {'group ' + str(act.pgid) + ', ' if act.signal_group else ''}"
                    f"pids {' '.join(str(p.pid) for p in live)}"
                )
            if sent:
                _wait([p for members in pinned for p in members], grace_s, sleep)
        for members in pinned:
            for p in members:
                outcome = _outcome(p)
                journal.write("outcome", action="stop", pid=p.pid, result=outcome.result)
                result.outcomes.append(outcome)
    finally:
        for members in pinned:
            for p in members:
                p.close()
