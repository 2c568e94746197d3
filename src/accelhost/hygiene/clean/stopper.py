"""How `clean` stops orphans: `accelhost.remove.stop`'s loop, each signal journaled before
it is sent (and a group signalled while a pinned member is still in it).
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from accelhost.host.live import live_host
from accelhost.hygiene.clean.actions import CleanResult, Outcome, StopProcesses
from accelhost.hygiene.clean.journal import Journal
from accelhost.hygiene.text import one_line
from accelhost.readers.procs import ProcessInfo, read_process
from accelhost.remove.signals import Pinned, signal_pinned_group
from accelhost.remove.stop import D_STATE, StopLoop, send_each


def stop_all(
    stops: list[StopProcesses],
    grace_s: float,
    journal: Journal,
    result: CleanResult,
    say: Callable[[str], None],
) -> None:
    host = live_host()
    refs = {t.pid: t for act in stops for t in act.targets}

    def targets() -> dict[int, ProcessInfo]:
        now = {pid: read_process(host, pid, cmdline=False) for pid in refs}
        return {
            pid: info
            for pid, info in now.items()
            if info and not info.is_zombie and info.start_ticks == refs[pid].start_ticks
        }

    def send(sig: int, pins: list[Pinned]) -> list[int]:
        name = signal.Signals(sig).name
        sent: list[int] = []
        for act in stops:
            live = [p for p in pins if p.pid in {t.pid for t in act.targets}]
            if not live:
                continue
            journal.write(
                "intent",
                action="signal",
                signal=name,
                pgid=act.pgid if act.signal_group else None,
                pids=[p.pid for p in live],
                cmdlines=[one_line(refs[p.pid].cmdline, 300) for p in live],
                reason=act.reason,
            )
            if act.signal_group:
                err = signal_pinned_group(act.pgid, live, sig)
                if isinstance(err, PermissionError):
                    say(f"  killpg({act.pgid}, {name}): {err.strerror}")
            sent += send_each(sig, live)
            for p in live:
                if p.denied:
                    say(f"  pid {p.pid}: {p.denied}")
            say(
                f"  {name} -> {'group ' + str(act.pgid) + ', ' if act.signal_group else ''}"
                f"pids {' '.join(str(p.pid) for p in live)}"
            )
        return sent

    loop = StopLoop(host, targets, send)
    left = loop.run(grace_s, grace_s)
    for pid in refs:
        pin = loop.members.get(pid)
        if pid not in left:
            outcome = Outcome("stop", f"pid {pid}", "gone", True)
        elif pin is not None and pin.denied:
            outcome = Outcome("stop", f"pid {pid}", pin.denied, False)
        else:
            why = D_STATE if left[pid].state == "D" else "still alive after SIGKILL"
            outcome = Outcome("stop", f"pid {pid}", why, False)
        journal.write("outcome", action="stop", pid=pid, result=outcome.result)
        result.outcomes.append(outcome)
