"""The one stop loop (`remove.signals`) needs nothing of `run` or `clean` but what it is
handed: here the test's own children are the targets (`targets` reaps and reads them) and
the loop sleeps in a poll of the pidfds it registered. Processes are killed by pid in
`finally`.
"""

from __future__ import annotations

import select
import subprocess
import sys
import time

from accelhost.host.live import LiveHost
from accelhost.readers.procs import ProcessInfo, read_process
from accelhost.remove.signals import StopLoop

STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(1000)"


class Recorder:
    """A poll that remembers which fds are registered on it."""

    def __init__(self) -> None:
        self.poll_ = select.poll()
        self.fds: set[int] = set()

    def register(self, fd: int, mask: int) -> None:
        self.fds.add(fd)
        self.poll_.register(fd, mask)

    def unregister(self, fd: int) -> None:
        self.fds.discard(fd)
        self.poll_.unregister(fd)

    def poll(self, ms: float) -> list[tuple[int, int]]:
        return self.poll_.poll(ms)


def _targets(procs: list[subprocess.Popen[bytes]]) -> dict[int, ProcessInfo]:
    host = LiveHost()
    out = {}
    for p in procs:
        if p.poll() is None:  # reaps what exited
            info = read_process(host, p.pid, cmdline=False)
            if info is not None and info.state not in ("Z", "X"):
                out[p.pid] = info
    return out


def _ignores_term(pid: int) -> bool:
    """SIGTERM (15) is in the process's ignored set (SigIgn, a hex mask of bit n-1)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (15 - 1)))
    return False


def test_sigterm_then_sigkill_for_the_stubborn_and_every_pidfd_let_go() -> None:
    procs = [subprocess.Popen(["sleep", "1000"])]
    procs += [subprocess.Popen([sys.executable, "-c", STUBBORN]) for _ in range(2)]
    try:
        for p in procs[1:]:  # until the stubborn ones have installed their SIG_IGN
            deadline = time.monotonic() + 30
            while not _ignores_term(p.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _ignores_term(p.pid), f"{p.pid} never ignored SIGTERM"
        lines: list[str] = []
        poller = Recorder()
        loop = StopLoop(LiveHost(), lambda: _targets(procs), log=lines.append, poller=poller)  # type: ignore[arg-type]
        left = loop.run(0.5, 5.0)
        assert sorted(loop.terminated) == sorted(p.pid for p in procs)
        assert sorted(loop.killed) == sorted(p.pid for p in procs[1:])
        assert left == {}
        assert [p.wait(timeout=5) for p in procs] == [-15, -9, -9]
        assert poller.fds == set()  # every pidfd it watched was handed back
        assert all(pin.fd is None for pin in loop.members.values())
        assert any("SIGKILL in 0.5 s" in x for x in lines)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def test_a_spared_process_gets_no_sigterm_but_the_sigkill() -> None:
    """`run` spares the command's group the teardown's SIGTERM when the stop signal was
    forwarded to it already; it still gets the SIGKILL after the grace."""
    procs = [subprocess.Popen(["sleep", "1000"]) for _ in range(2)]
    try:
        spared = procs[0].pid
        loop = StopLoop(LiveHost(), lambda: _targets(procs), spare=lambda i: i.pid == spared)
        assert loop.run(0.2, 5.0) == {}
        assert loop.terminated == [procs[1].pid]
        assert loop.killed == [spared]
        assert [p.wait(timeout=5) for p in procs] == [-9, -15]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
