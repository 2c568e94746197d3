"""The teardown needs nothing of the supervisor but the `Tree` it is handed.

Here the owner is the test: its own children are the tree, `live` reaps and reads them,
`wait` sleeps in a poll of the pidfds the teardown watches. Processes are killed by pid in
`finally`.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time

from accelhost.host.live import LiveHost
from accelhost.readers.procs import ProcessInfo, read_process
from accelhost.supervisor.options import RunOutcome
from accelhost.supervisor.teardown import Tree, tear_down

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"


def _tree(
    procs: list[subprocess.Popen[bytes]], grace_s: float, lines: list[str], watched: set[int]
) -> Tree:
    host = LiveHost()
    poller = select.poll()

    def live() -> dict[int, ProcessInfo]:
        out = {}
        for p in procs:
            if p.poll() is None:  # reaps what exited
                info = read_process(host, p.pid, cmdline=False)
                if info is not None and info.state not in ("Z", "X"):
                    out[p.pid] = info
        return out

    def wait(timeout_s: float) -> list[int]:
        return [fd for fd, _ev in poller.poll(timeout_s * 1000)]

    def watch(fd: int) -> None:
        watched.add(fd)
        poller.register(fd, select.POLLIN)

    def unwatch(fd: int) -> None:
        watched.discard(fd)
        poller.unregister(fd)

    return Tree(
        host=host,
        cmd_pid=None,
        grace_s=grace_s,
        kill_wait_s=5.0,
        log=lines.append,
        warn=lines.append,
        live=live,
        wait=wait,
        watch=watch,
        unwatch=unwatch,
    )


def test_sigterm_then_sigkill_for_the_stubborn_and_every_pidfd_let_go() -> None:
    procs = [subprocess.Popen(["sleep", "1000"])]
    procs += [subprocess.Popen([sys.executable, "-c", STUBBORN]) for _ in range(2)]
    try:
        time.sleep(0.3)  # the stubborn ones have installed their SIG_IGN
        lines: list[str] = []
        watched: set[int] = set()
        outcome = RunOutcome(status=0, reason="exited")
        tear_down(_tree(procs, 0.5, lines, watched), outcome)
        assert sorted(outcome.terminated) == sorted(p.pid for p in procs)
        assert sorted(outcome.killed) == sorted(p.pid for p in procs[1:])
        assert outcome.survivors == []
        assert [p.wait(timeout=5) for p in procs] == [-15, -9, -9]
        assert watched == set()  # every pidfd it watched was handed back
        assert any("SIGKILL in 0.5 s" in x for x in lines)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
