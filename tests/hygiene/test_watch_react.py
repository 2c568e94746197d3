"""`watch` reacts at once, on real processes and files: an engine frontend's death makes
its orphan FAIL by a round the exit started (not the 60 s interval), a new leaked engine
file is judged when it reaches --shm-min-age, the kernel drops exits nobody watches, and a
lost source is said once in the log and in a metric.

Nothing here asserts a duration: each test checks *which* round judged (one started by the
event, long before the next interval could have come). Processes are killed by pid in
finally or by the lab's teardown; files are removed with their directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hygiene_lab import Lab, wait_gone
from prometheus_client import generate_latest

from accelhost.host.live import LiveHost
from accelhost.hygiene.clean.cleaner import CleanFilters
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.react import Reactor
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher
from accelhost.kernel.procevents import PROC_EVENT_EXIT

WAIT_S = 30.0  # well below the 60 s interval: a round seen within it was not the timer's


def _reactor() -> Reactor:
    logs: list[object] = []
    reactor = Reactor.open(logs.append, lambda _s, _w: None)
    if reactor.events is None:
        reactor.close()
        pytest.skip("the kernel gives this process no process events (root, host PID ns)")
    return reactor


def _until(cond: object) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


def test_the_kernel_passes_only_exits_of_watched_pids() -> None:
    reactor = _reactor()
    watched = subprocess.Popen(["sleep", "1000"])
    other = subprocess.Popen(["sleep", "1000"])
    try:
        reactor.watch([watched.pid])
        assert reactor.events is not None
        reactor.events.read()  # what was queued before the filter
        other.kill()
        other.wait()
        time.sleep(0.3)
        raw = reactor.events.read()  # what reached the socket at all since
        assert other.pid not in [ints[1] for what, ints in raw if what == PROC_EVENT_EXIT]
        watched.kill()
        watched.wait()
        wake = reactor.wait(threading.Event(), time.monotonic() + WAIT_S)
        assert wake is not None and wake.exited == (watched.pid,)
    finally:
        for p in (watched, other):
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()
        reactor.close()


def _leaked(watcher: Watcher, name: str) -> bool:
    """The last round judged the file `name` leaked (/dev/shm is shared: not by counts)."""
    rnd = watcher.collector.latest()
    posix = [c for c in rnd.report.checks if c.name == "posix_shm"] if rnd else []
    return any(
        e.get("path", "").endswith("/" + name) and "held by no" in e["reason"]
        for c in posix
        for e in c.evidence
    )


def _run(watcher: Watcher) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    done = watcher.collector.rounds_done()
    assert _until(lambda: watcher.collector.rounds_done() >= done + 1)
    return stop, thread


def _killed_frontend_is_fail_by_its_exit(lab: Lab, engine_born_after_first_round: bool) -> None:
    """A 60 s watch; a stand-in server's frontend killed: a round its exit started (long
    before the interval) makes its engine child an orphan, FAIL in /metrics."""
    _reactor().close()
    node = lab.device_node()
    server = None if engine_born_after_first_round else lab.server(node)
    logs: list[dict[str, object]] = []
    watcher = Watcher(
        LiveHost,
        HygieneOptions(device_globs=(lab.glob(),)),
        WatchConfig(interval_s=60.0),
        logs.append,
    )
    stop, thread = _run(watcher)
    try:
        fe, engine, _worker = server or lab.server(node)
        rounds = watcher.collector.rounds_done()
        os.kill(fe, signal.SIGKILL)
        assert wait_gone(fe)
        assert _until(lambda: watcher.collector.rounds_done() > rounds)
        # that round was started by the frontend's exit, within WAIT_S < 60 s
        assert any(e["event"] == "process_exit" and fe in e["pids"] for e in logs)  # type: ignore[operator]
        text = generate_latest(watcher.registry).decode()
        assert 'accelhost_check_status{check="orphan_engines",state="FAIL"} 1.0' in text
        rnd = watcher.collector.latest()
        assert rnd is not None
        orphans = next(c for c in rnd.report.checks if c.name == "orphan_engines")
        assert engine in [e.get("pid") for e in orphans.evidence]
    finally:
        stop.set()
        thread.join(timeout=70)


def test_an_orphan_is_fail_by_the_frontend_exit_not_the_interval(lab: Lab) -> None:
    _killed_frontend_is_fail_by_its_exit(lab, engine_born_after_first_round=False)


def test_an_engine_born_after_the_last_round_is_watched_from_its_exec(lab: Lab) -> None:
    """An engine started and killed between two rounds (a crash during start-up, each crash
    of a crash loop): no round saw it, yet its frontend's exit starts a round, since its
    exec told the watch. Without that, nothing would wake the watch before the interval."""
    _killed_frontend_is_fail_by_its_exit(lab, engine_born_after_first_round=True)


def test_an_orphan_is_confirmed_and_stopped_long_before_the_interval(
    lab: Lab, tmp_path: Path
) -> None:
    """With --clean-orphan-rounds 2, the round the frontend's exit started is the first
    sighting; the second comes CONFIRM_S later, not at the 60 s interval."""
    _reactor().close()
    node = lab.device_node()
    fe, engine, worker = lab.server(node)
    logs: list[dict[str, object]] = []
    config = WatchConfig(
        interval_s=60.0,
        auto_clean=True,
        clean_orphan_rounds=2,
        journal=str(tmp_path / "j.jsonl"),
        grace_s=1.0,
        scope=CleanFilters(pids=frozenset({engine, worker})),  # nobody else's orphans
    )
    watcher = Watcher(LiveHost, HygieneOptions(device_globs=(lab.glob(),)), config, logs.append)
    stop, thread = _run(watcher)
    try:
        assert _until(lambda: watcher.collector.rounds_done() >= 1)
        os.kill(fe, signal.SIGKILL)
        assert wait_gone(fe)
        assert _until(lambda: wait_gone(engine, timeout=0.1) and wait_gone(worker, timeout=0.1))
        stopped = [e for e in logs if e["event"] == "auto_clean"]
        assert stopped, logs
        # rounds: the first, the exit's (first sighting), the confirming one (a few more
        # may follow while it stops), never one of the 60 s timer's
        assert watcher.collector.rounds_done() >= 3
    finally:
        stop.set()
        thread.join(timeout=70)


def test_a_new_leaked_engine_file_is_judged_at_its_min_age(shm_dir: Path) -> None:
    opts = HygieneOptions(shm_dirs=(str(shm_dir),), shm_min_age_s=1.0)
    watcher = Watcher(LiveHost, opts, WatchConfig(interval_s=60.0), lambda _e: None)
    stop, thread = _run(watcher)
    try:
        (shm_dir / "psm_leaked_by_a_crash").write_bytes(b"\0" * 4096)

        # leaked (held by no process, unchanged 1 s) in a round long before the 60 s interval
        assert _until(lambda: _leaked(watcher, "psm_leaked_by_a_crash"))
    finally:
        stop.set()
        thread.join(timeout=70)


def test_a_lost_source_is_said_once_in_the_log_and_a_metric() -> None:
    logs: list[dict[str, object]] = []
    watcher = Watcher(LiveHost, HygieneOptions(), WatchConfig(), logs.append)
    reactor = Reactor.open(logs.append, watcher.collector.degraded, ["/nonexistent-shm-dir"])
    try:
        assert reactor.files is None
        fallbacks = [e for e in logs if e["event"] == "fallback" and e["source"] == "inotify"]
        assert len(fallbacks) == 1
        text = generate_latest(watcher.registry).decode()
        assert 'accelhost_watch_fallback{source="inotify"} 1.0' in text
    finally:
        reactor.close()


def test_an_inotify_overflow_makes_the_next_round_read_all_said_once(shm_dir: Path) -> None:
    """More files made between two reads than the kernel queues: names were dropped, so
    the watch must read the shm dirs in full (a lost wake-up), not judge what it got."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip(f"max_queued_events is {limit}: too many files to flood it")
    logs: list[dict[str, object]] = []
    reactor = Reactor.open(logs.append, lambda _s, _w: None, [str(shm_dir)], lambda _n: True)
    try:
        assert reactor.files is not None
        for flood in range(2):
            for n in range(limit + 16):
                os.close(os.open(shm_dir / f"psm_{flood}_{n}", os.O_CREAT | os.O_WRONLY, 0o600))
            wake = reactor.wait(threading.Event(), time.monotonic() + WAIT_S)
            assert wake is not None and wake.lost and wake.new_files == ()
        said = [e for e in logs if e["event"] == "fallback" and e["source"] == "inotify"]
        assert len(said) == 1 and "overflow" in str(said[0]["reason"])
        (shm_dir / "psm_after").write_bytes(b"x")
        wake = reactor.wait(threading.Event(), time.monotonic() + WAIT_S)
        assert wake is not None and wake.new_files == ("psm_after",) and not wake.lost
    finally:
        reactor.close()


# Forks a child that holds argv[1] open and mapped, prints the child's pid, and never
# reaps it: killed, the child stays a zombie listed in /proc.
ZOMBIE_PARENT = r"""
import mmap, os, sys, time
pid = os.fork()
if pid == 0:
    fd = os.open(sys.argv[1], os.O_RDWR)
    m = mmap.mmap(fd, 4096)
    print(os.getpid(), flush=True)
    time.sleep(1000)
    os._exit(0)
time.sleep(1000)
"""


def test_a_holder_that_died_a_zombie_leaves_its_file_judged_at_once(shm_dir: Path) -> None:
    _reactor().close()
    held = shm_dir / "psm_of_a_zombie"
    held.write_bytes(b"\0" * 4096)
    old = time.time() - 3600
    os.utime(held, (old, old))
    parent = subprocess.Popen(
        [sys.executable, "-c", ZOMBIE_PARENT, str(held)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    opts = HygieneOptions(shm_dirs=(str(shm_dir),))
    # no safety-net round in this test: only the exit can tell the zombie holds nothing
    config = WatchConfig(interval_s=60.0, full_every=1000)
    watcher = Watcher(LiveHost, opts, config, lambda _e: None)
    watcher.run_once()
    watcher.run_once()  # the child is no longer new: not read again unless told
    stop, thread = _run(watcher)
    try:
        assert not _leaked(watcher, held.name)  # held by the child
        os.kill(child, signal.SIGKILL)
        assert _until(lambda: _leaked(watcher, held.name))
        assert os.path.exists(f"/proc/{child}")  # a zombie: /proc still lists it
    finally:
        stop.set()
        thread.join(timeout=70)
        with contextlib.suppress(ProcessLookupError):
            parent.kill()
        parent.wait()
        parent.stdout.close()
