"""Ctrl-C: SIGINT to a real `accelhost bench bind` stops the running command (and what it
started) and prints the report of the runs finished so far; SIGTERM does the same."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Runs 1-3 finish at once; run 4 starts a grandchild and both wait (10 minutes).
COMMAND = r"""
import os, subprocess, sys, time
d = sys.argv[1]
n = len(os.listdir(d)) + 1
open(os.path.join(d, "run%d" % n), "w").write(str(os.getpid()))
if n >= 4:
    g = subprocess.Popen(["sleep", "600"])
    open(os.path.join(d, "grandchild"), "w").write(str(g.pid))
    time.sleep(600)
print("n=%d" % n)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for(cond, what: str, deadline_s: float = 60.0) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _blocked(d: Path) -> list[int]:
    """The pids of run 4 and its grandchild (the ones that wait), as far as written."""
    pids = []
    for name in ("run4", "grandchild"):
        path = d / name
        if path.exists() and path.read_text():
            pids.append(int(path.read_text()))
    return pids


def _ours(pid: int, d: Path) -> bool:
    """Still the process this test started (a pid can be reused once it has ended)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read()
    except FileNotFoundError:
        return False
    return str(d).encode() in cmdline or cmdline == b"sleep\x00600\x00"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_ends_the_running_child_and_reports_what_was_measured(tmp_path, sig):
    runs = tmp_path / "runs"
    runs.mkdir()
    argv = [sys.executable, "-m", "accelhost", "bench", "bind", "--cpus", "0", "--repeats", "5"]
    argv += ["--warmup", "0", "--grace", "5", "--metric", "n=([0-9]+)", "--json", "--"]
    proc = subprocess.Popen(
        [*argv, sys.executable, "-c", COMMAND, str(runs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        grandchild = runs / "grandchild"
        _wait_for(lambda: grandchild.exists() and grandchild.read_text(), "run 4 to start")
        run4 = int((runs / "run4").read_text())
        assert _alive(run4) and _alive(int(grandchild.read_text()))
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err  # 130 for Ctrl-C
        data = json.loads(out)
        assert data["interrupted"] is True
        assert [(r["index"], r["status"]) for r in data["runs"]] == [
            (1, "ok"),
            (2, "ok"),
            (3, "ok"),
            (4, "interrupted"),
        ]
        assert data["runs"][3]["detail"] == f"stopped by {sig.name}"
        assert data["arms"]["unbound"]["values"] == [1.0]  # run 4 (unbound) is not counted
        assert data["arms"]["bound"]["values"] == [2.0, 3.0]
        assert "interrupted" in err and "Traceback" not in err
        # The command and what it started are gone, not left running.
        blocked = _blocked(runs)
        assert len(blocked) == 2
        for pid in blocked:
            _wait_for(lambda pid=pid: not _alive(pid), f"process {pid} to end", 30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for pid in _blocked(runs):
            if _alive(pid) and _ours(pid, runs):
                os.kill(pid, signal.SIGKILL)
