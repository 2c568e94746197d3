"""`accelhost run` supervising a real vLLM server: nothing of the tree outlives the run."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest
from engine import Server, wait_gone

EXIT_WAIT_S = 180  # generous: a loaded 2-core machine


def _nothing_left(server: Server, files: set[str]) -> None:
    wait_gone(server, timeout=60)
    assert not server.tracked.alive(), f"left running: {server.tracked.alive()}"
    left = {f for f in files if os.path.exists(f)}
    assert not left, f"/dev/shm files left: {left}"


@pytest.mark.servers("run_fail_on_exit")
def test_run_fail_on_exit_engine_killed(server_pool) -> None:
    server = server_pool.get("run_fail_on_exit")
    assert server.answers()
    engine = server.pid_of("VLLM::EngineCore")
    server.refresh()
    files = set(server.shm_files)
    assert files

    server.tracked.signal([engine], signal.SIGKILL)
    try:
        rc = server.popen.wait(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"accelhost run did not end\n{server.log_tail()}") from None
    assert rc != 0, server.log_tail()
    _nothing_left(server, files)


@pytest.mark.servers("run_sigterm")
def test_run_sigterm_stops_vllm_gracefully(server_pool) -> None:
    server = server_pool.get("run_sigterm")
    assert server.answers()
    server.refresh()
    files = set(server.shm_files)
    assert files

    os.kill(server.popen.pid, signal.SIGTERM)  # what `docker stop` sends to PID 1
    try:
        rc = server.popen.wait(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"accelhost run did not end\n{server.log_tail()}") from None
    log = server.log_text()
    # vLLM's own graceful stop, in its own words, before the grace ran out:
    assert "[shutdown] API server: shutting down FastAPI HTTP server" in log, server.log_tail()
    assert "Application shutdown complete." in log, server.log_tail()
    assert "sent SIGKILL" not in log, "accelhost run had to SIGKILL: no graceful stop"
    # vLLM exits 0 when stopped; `run` says it was stopped, not done (docs/run.md): 128 + 15.
    assert rc == 128 + signal.SIGTERM, f"rc={rc}\n{server.log_tail()}"
    _nothing_left(server, files)
