"""`watch` as a daemon that runs for weeks: a full disk under its journal, a SIGHUP from
logrotate, and clients of /metrics that connect and never ask must not end it, fail its
rounds, or blind its metrics."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hygiene_lab import Lab, metric, scrape, shmids_now, watch_cli
from prometheus_client import generate_latest

from accelhost.host.live import LiveHost
from accelhost.hygiene.clean.cleaner import CleanFilters
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.metrics import MAX_SCRAPES, MetricsServer
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher


def test_a_journal_on_a_full_disk_fails_no_round_and_is_said_once(lab: Lab) -> None:
    """No record, no action; but the round's checks and metrics stand (before, every round
    failed: every check UNKNOWN, two log lines a round, for as long as the disk was full)."""
    leaked, _ = lab.segment("create-exit", 4096)
    logs: list[dict[str, object]] = []
    watcher = Watcher(
        LiveHost,
        HygieneOptions(shm_min_age_s=0),
        WatchConfig(
            interval_s=0.1,
            auto_clean=True,
            journal="/dev/full",  # every write: ENOSPC
            scope=CleanFilters(shmids=frozenset({leaked})),  # only what this test made
        ),
        logs.append,
    )
    watcher.run(threading.Event(), rounds=3)
    text = generate_latest(watcher.registry).decode()
    assert metric(text, "accelhost_watch_round_failures_total") == 0.0
    assert 'accelhost_check_status{check="shared_memory",state="WARN"} 1.0' in text
    assert (
        metric(text, 'accelhost_clean_actions_total{kind="remove_segment",result="failed"}') == 3.0
    )
    assert leaked in shmids_now()
    events = [e["event"] for e in logs]
    assert events.count("auto_clean_failed") == 1 and events.count("auto_clean") == 1
    assert "round_failed" not in events
    # room again: the next round acts, and says so
    journal = lab.tmp / "clean.jsonl"
    watcher.config = dataclasses.replace(watcher.config, journal=str(journal))
    watcher.run_once()
    assert leaked not in shmids_now()
    assert logs[-1]["event"] == "auto_clean_done"  # the retry itself was not said again
    assert str(leaked) in journal.read_text()


def _runs(addr: str) -> float:
    runs = metric(scrape(addr), "accelhost_watch_runs_total")
    assert runs is not None
    return runs


def _after_rounds(addr: str, n: int) -> float:
    start = _runs(addr)
    for _ in range(1200):  # a bound, not a timing: rounds come every 0.1 s
        if (now := _runs(addr)) >= start + n:
            return now
        time.sleep(0.05)
    raise AssertionError(f"no {n} rounds after {start}")


def test_sighup_does_not_end_the_watch() -> None:
    """logrotate's usual `postrotate kill -HUP`: the journal is opened for each clean, so
    there is nothing to reopen, and the watch goes on (it died of the default action)."""
    with watch_cli("--interval", "0.1") as (proc, addr):
        _after_rounds(addr, 1)
        proc.send_signal(signal.SIGHUP)
        _after_rounds(addr, 3)
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert json.loads(out.splitlines()[-1])["event"] == "stopped"


def test_idle_metrics_clients_take_neither_the_rounds_fds_nor_the_watch() -> None:
    """Clients that connect and never ask: each held a thread and a descriptor for ever,
    and at the descriptor limit every round failed with EMFILE."""
    with watch_cli("--interval", "0.1", nofile=64) as (proc, addr):
        host, port = addr.rsplit(":", 1)
        before = _runs(addr)
        idle: list[socket.socket] = []
        try:
            for _ in range(100):
                with contextlib.suppress(OSError):  # a full accept queue: refused or late
                    idle.append(socket.create_connection((host, int(port)), timeout=0.5))
            assert len(os.listdir(f"/proc/{proc.pid}/fd")) < MAX_SCRAPES + 24
        finally:
            for s in idle:
                s.close()
        after = _after_rounds(addr, 3)
        text = scrape(addr)
        assert after > before
        assert metric(text, "accelhost_watch_round_failures_total") == 0.0


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    srv = MetricsServer(
        "127.0.0.1", 0, Watcher(LiveHost, HygieneOptions(), WatchConfig(), print).registry
    )
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=30)


def test_a_metrics_client_that_never_asks_is_closed(
    server: MetricsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelhost.hygiene.watch import metrics as watch_metrics

    monkeypatch.setattr(watch_metrics._ScrapeHandler, "timeout", 0.2)
    host, port = server.server_address[:2]
    with socket.create_connection((str(host), port), timeout=30) as quiet:
        assert quiet.recv(1) == b""  # closed by the server, not by our timeout
    assert "accelhost_watch_runs_total 0.0" in scrape(f"{host!s}:{port}")


def test_metrics_answer_scrapes_beyond_the_limit_after_they_end(server: MetricsServer) -> None:
    """More concurrent scrapes than MAX_SCRAPES: each is answered or closed, none hangs."""
    host, port = server.server_address[:2]
    results: list[bool] = []

    def one_scrape() -> None:
        try:
            results.append("accelhost_watch_runs_total" in scrape(f"{host!s}:{port}"))
        except OSError:
            results.append(False)

    threads = [threading.Thread(target=one_scrape) for _ in range(4 * MAX_SCRAPES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 * MAX_SCRAPES and any(results)
    assert "accelhost_watch_runs_total" in scrape(f"{host!s}:{port}")
