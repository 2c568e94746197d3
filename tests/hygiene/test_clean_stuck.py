"""A process that survives SIGKILL in D state is reported for a device reset, not retried."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from accelhost.host.base import Host
from accelhost.host.live import LiveHost
from accelhost.hygiene.clean import cleaner
from accelhost.hygiene.clean.cleaner import Journal, ProcessRef, StopProcesses, execute
from accelhost.hygiene.options import HygieneOptions
from accelhost.readers.procs import ProcessInfo, read_process
from accelhost.remove.signals import Pinned


def test_d_state_is_reported_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc = subprocess.Popen(["sleep", "1000"])
    try:
        info = read_process(LiveHost(), proc.pid)
        assert info is not None
        sent: list[int] = []
        # Simulate an uninterruptible sleeper: signals are recorded, the process "stays".
        monkeypatch.setattr(Pinned, "alive", property(lambda self: True))
        monkeypatch.setattr(Pinned, "send", lambda self, sig: sent.append(sig))
        real = cleaner.read_process

        def in_d_state(host: Host, pid: int, *, cmdline: bool = True) -> ProcessInfo | None:
            found = real(host, pid, cmdline=cmdline)
            return None if found is None else replace(found, state="D")

        monkeypatch.setattr(cleaner, "read_process", in_d_state)
        journal = Journal(tmp_path / "j.jsonl")
        action = StopProcesses(
            pgid=proc.pid,
            signal_group=False,
            targets=(ProcessRef(proc.pid, info.start_ticks, "S", "sleep 1000"),),
            reason="test",
        )
        result = execute([action], HygieneOptions(), journal, grace_s=0.1)
        journal.close()
        assert sent == [15, 9]  # one SIGTERM, one SIGKILL: no retry loop
        (outcome,) = result.outcomes
        assert not outcome.ok and "D state" in outcome.result and "reset" in outcome.result
        assert not result.ok
    finally:
        proc.kill()
        proc.wait()


def test_reused_pid_is_never_signalled(tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "1000"])
    try:
        info = read_process(LiveHost(), proc.pid)
        assert info is not None
        # Planned with another start time: the pid now names a different process.
        ref = ProcessRef(proc.pid, info.start_ticks + 1, "S", "an engine that exited")
        journal = Journal(tmp_path / "j.jsonl")
        result = execute(
            [StopProcesses(proc.pid, False, (ref,), "test")], HygieneOptions(), journal, 0.1
        )
        journal.close()
        assert proc.poll() is None  # still running: nothing was sent to it
        assert [o.result for o in result.outcomes] == ["gone"]
    finally:
        proc.kill()
        proc.wait()


def test_without_pidfd_the_start_time_check_still_protects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kernels before 5.3 have no pidfd_open: signal by pid after re-identifying it."""
    import os

    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    victim = subprocess.Popen(["sleep", "1000"])
    bystander = subprocess.Popen(["sleep", "1000"])
    try:
        v = read_process(LiveHost(), victim.pid)
        b = read_process(LiveHost(), bystander.pid)
        assert v is not None and b is not None
        refs = (
            ProcessRef(victim.pid, v.start_ticks, "S", "sleep"),
            ProcessRef(bystander.pid, b.start_ticks + 7, "S", "someone else"),
        )
        journal = Journal(tmp_path / "j.jsonl")
        result = execute(
            [StopProcesses(victim.pid, False, refs, "test")], HygieneOptions(), journal, 5
        )
        journal.close()
        assert victim.wait(timeout=20) == -15  # SIGTERM reached the planned process
        assert bystander.poll() is None  # the mismatched one was left alone
        assert [o.ok for o in result.outcomes] == [True, True]
    finally:
        for p in (victim, bystander):
            p.kill()
            p.wait()
