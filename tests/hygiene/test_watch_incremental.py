"""Incremental watch rounds on real processes and files: a round reads what changed, a
holder scan runs only when a file becomes a candidate, and the verdicts match a full look.

Everything a test starts is killed by pid (pidfd) and every file it made removed, in
finally or the lab's teardown. No timing is asserted here (benchmarks/watch.py measures).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hygiene_fakes import NOW, FakeHost, npu_smi
from hygiene_lab import MAKE_SEM_PY, Lab, run_cli, wait_gone
from prometheus_client import generate_latest

from accelhost.host.live import LiveHost
from accelhost.hygiene.clean.actions import CleanFilters
from accelhost.hygiene.clean.cleaner import plan_clean
from accelhost.hygiene.facts.host import read_facts
from accelhost.hygiene.facts.rounds import IncrementalState
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher
from fakehost import CountingHost, fake_tools

# Holds the file named in argv[1] open and mapped, prints "ready", sleeps until killed.
HOLDER = r"""
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096)
print("ready", flush=True)
time.sleep(1000)
"""


def _old_file(path: Path) -> Path:
    path.write_bytes(b"\0" * 4096)
    old = time.time() - 3600
    os.utime(path, (old, old))
    return path


def _holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _stop(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    proc.wait(timeout=20)
    if proc.stdout is not None:
        proc.stdout.close()


def _options(shm_dir: Path, **kw: object) -> HygieneOptions:
    """Only the private dir: what other jobs leave in the shared /dev/shm stays out."""
    return HygieneOptions(shm_dirs=(str(shm_dir),), **kw)  # type: ignore[arg-type]


def _files(known: object, shm_dir: Path) -> set[str]:
    listing = known.shm_files[str(shm_dir)]  # type: ignore[attr-defined]
    return {f.name for f in listing or ()}


def test_a_round_reads_processes_and_files_that_came_and_went(shm_dir: Path) -> None:
    host = LiveHost()
    state = IncrementalState(_options(shm_dir), full_every=1000)
    state.read(host, host, time.time())
    assert state.last.full
    sleeper = subprocess.Popen(["sleep", "1000"])
    try:
        (shm_dir / "psm_new").write_bytes(b"x")
        known = state.read(host, host, time.time())
        assert not state.last.full and state.last.new >= 1
        assert sleeper.pid in known.processes and "psm_new" in _files(known, shm_dir)
        sleeper.kill()
        sleeper.wait()
        (shm_dir / "psm_new").unlink()
        known = state.read(host, host, time.time())
        assert sleeper.pid not in known.processes
        assert "psm_new" not in _files(known, shm_dir)
        assert state.last.gone >= 1 and not state.last.full
    finally:
        with contextlib.suppress(ProcessLookupError):
            sleeper.kill()
        sleeper.wait()


def test_holder_scan_runs_only_when_a_file_becomes_a_candidate(shm_dir: Path) -> None:
    held = _old_file(shm_dir / "psm_held")
    holder = _holder(held)
    try:
        host = LiveHost()
        state = IncrementalState(_options(shm_dir), full_every=1000)
        state.read(host, host, time.time())
        known = state.read(host, host, time.time())
        assert not state.last.holder_scan  # nothing changed: no process's maps read
        assert known.held.holds(next(f for f in known.shm_files[str(shm_dir)] or ()))
        _stop(holder)
        known = state.read(host, host, time.time())
        # its only holder went and it is old: a candidate, confirmed by a holder scan
        assert state.last.holder_scan and not state.last.full
        f = next(f for f in known.shm_files[str(shm_dir)] or ())
        assert not known.held.holds(f)
        state.read(host, host, time.time())
        assert not state.last.holder_scan  # confirmed once: not scanned again
    finally:
        _stop(holder)


def test_a_files_birth_is_read_once_nobody_holds_it(shm_dir: Path) -> None:
    """Only an unheld file's birth is ever asked (it names the container that left it),
    so a round reads no birth of a held file; once its holder goes, its birth is read:
    the creation time, not its mtime (set an hour back)."""
    made = time.time()
    path = _old_file(shm_dir / "psm_a")
    holder = _holder(path)
    try:
        host = LiveHost()
        state = IncrementalState(_options(shm_dir), full_every=1000)
        (f,) = state.read(host, host, time.time()).shm_files[str(shm_dir)] or ()
        assert f.birth is None
        _stop(holder)
        (f,) = state.read(host, host, time.time()).shm_files[str(shm_dir)] or ()
        assert f.birth is not None and abs(f.birth - made) < 60 and f.mtime < made - 3000
    finally:
        _stop(holder)


def _stat_in(known: object, path: Path) -> float:
    listing = known.shm_files[str(path.parent)]  # type: ignore[attr-defined]
    return next(f.mtime for f in listing or () if f.path == str(path))


@pytest.mark.parametrize("full_round", [True, False], ids=["full", "incremental"])
def test_a_file_is_judged_on_its_stat_of_this_round(shm_dir: Path, full_round: bool) -> None:
    """Written after the state last stat'ed it, then left by its holder: the round that
    finds it unheld judges it on its stat now (the soak once saw a full round confirm a
    container's queue on its mtime of minutes before, and the cleaner refuse it as
    "changed since it was judged" every round after); a confirmed file written again is
    seen written."""
    path = _old_file(shm_dir / "psm_written")
    holder = _holder(path)
    try:
        host = LiveHost()
        state = IncrementalState(_options(shm_dir, shm_min_age_s=60), full_every=1000)
        state.read(host, host, time.time())
        state.read(host, host, time.time())
        path.write_bytes(b"\1" * 4096)  # the engine writes its queue; no round sees it
        _stop(holder)
        if full_round:
            state.force_full()
        known = state.read(host, host, time.time())
        assert state.last.full is full_round
        assert _stat_in(known, path) == os.stat(path).st_mtime
        assert not state.files.confirmed  # written just now: not old enough to be a leftover
        later = time.time() + 120  # the rounds of two minutes on: old enough now
        state.read(host, host, later)
        assert state.last.holder_scan
        assert state.files.confirmed == {(str(path), os.stat(path).st_ino)}
        path.write_bytes(b"\2" * 4096)  # written again after it was confirmed
        known = state.read(host, host, time.time())
        assert _stat_in(known, path) == os.stat(path).st_mtime
        assert not state.files.confirmed  # someone wrote it: a holder scan must confirm it again
    finally:
        _stop(holder)


# Waits for a line on stdin, then makes the semaphore argv[1] as glibc's sem_open does:
# it holds it only under the deleted temporary name, as a vLLM Worker holds its sem.mp-*.
SEM_MAKER = (
    MAKE_SEM_PY
    + r"""
import sys, time
sys.stdin.readline()
sem = make_sem(sys.argv[1])
print("ready", flush=True)
time.sleep(1000)
"""
)


def test_a_semaphore_a_known_process_makes_later_is_held(shm_dir: Path) -> None:
    """A process the state has read already makes a semaphore (a Worker does, seconds
    after it starts): the state's record of its maps is older than the file, yet the file
    is never confirmed as leaked while the process lives, and is once it is gone."""
    sem = shm_dir / "sem.mp-later"
    proc = subprocess.Popen(
        [sys.executable, "-c", SEM_MAKER, str(sem)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        host = LiveHost()
        state = IncrementalState(_options(shm_dir, shm_min_age_s=60), full_every=1000)
        state.read(host, host, time.time())
        state.read(host, host, time.time())  # the process is known, and read
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ready"
        later = time.time() + 120  # old enough to be judged
        for _ in range(3):
            known = state.read(host, host, later)
            assert not state.last.full
            f = next(f for f in known.shm_files[str(shm_dir)] or () if f.path == str(sem))
            assert known.held.holds(f) or state.last.holder_scan
            assert not state.files.confirmed, "a live process's semaphore confirmed as leaked"
        _stop(proc)
        state.read(host, host, later)
        assert state.files.confirmed == {(str(sem), os.stat(sem).st_ino)}
    finally:
        _stop(proc)


def test_incremental_verdicts_match_a_full_look(shm_dir: Path) -> None:
    _old_file(shm_dir / "psm_leaked")
    kept = _old_file(shm_dir / "psm_kept")
    holder = _holder(kept)
    try:
        opts = _options(shm_dir, shm_min_age_s=1)
        inc = Watcher(LiveHost, opts, WatchConfig(full_every=1000), lambda _e: None)
        full = Watcher(LiveHost, opts, WatchConfig(full_every=1), lambda _e: None)
        for _ in range(3):
            a, b = inc.run_once(), full.run_once()
        assert inc._state.last.full is False and full._state.last.full is True

        def verdicts(rnd: object) -> dict[str, str]:
            """Our files' verdicts (/dev/shm and the rest of the host are shared)."""
            posix = next(c for c in rnd.report.checks if c.name == "posix_shm")  # type: ignore[attr-defined]
            return {
                e["path"]: e["reason"].split(",")[0]
                for e in posix.evidence
                if e.get("path", "").startswith(str(shm_dir))
            }

        assert verdicts(a) == verdicts(b)
        assert list(verdicts(a)) == [str(shm_dir / "psm_leaked")]
    finally:
        _stop(holder)


def _orphan_pids(rnd: object) -> list[int]:
    check = next(c for c in rnd.report.checks if c.name == "orphan_engines")  # type: ignore[attr-defined]
    return [e["pid"] for e in check.evidence if "pid" in e]


def test_an_orphan_is_seen_by_an_incremental_round(lab: Lab) -> None:
    """A frontend dies between rounds: the next round, reading no process in full, sees its
    engine child re-parented, and believes it an orphan on a full look read at once (a
    parent's command line it holds may be from before an exec). The round after is
    incremental again: that orphan was confirmed."""
    node = lab.device_node()
    fe, engine, _worker = lab.server(node)
    opts = HygieneOptions(device_globs=(lab.glob(),))
    watcher = Watcher(LiveHost, opts, WatchConfig(full_every=1000), lambda _e: None)
    watcher.run_once()
    watcher.run_once()
    os.kill(fe, signal.SIGKILL)
    assert wait_gone(fe)
    rnd = watcher.run_once()
    assert watcher._state.last.full and engine in _orphan_pids(rnd)
    rnd = watcher.run_once()
    assert not watcher._state.last.full and engine in _orphan_pids(rnd)


def test_a_parent_that_exec_d_into_a_frontend_is_not_judged_on_its_old_command(
    lab: Lab,
) -> None:
    """A container's `bash start.sh` sets up, then `exec vllm serve`: the same pid, a new
    command line, which an incremental round does not read again. Its engine child, new,
    is under what the round still holds as a shell: an orphan by its stale parent. A
    watch with --auto-clean would have stopped a healthy server after two rounds."""
    node = lab.device_node()
    fifo = lab.tmp / "go.fifo"
    os.mkfifo(fifo)
    ready = lab.tmp / "engine.pid"
    front = (
        f"exec 3<'{node}'; (exec -a VLLM::EngineCore sleep 1000 >/dev/null 2>&1 </dev/null) & "
        f"echo $! > '{ready}'; wait"
    )
    script = f"read -r _ < '{fifo}'; exec -a 'vllm serve tiny-model' bash -c \"$FRONT\""
    start = subprocess.Popen(
        ["bash", "-c", script], env={**os.environ, "FRONT": front}, start_new_session=True
    )
    lab.popens.append(start)  # type: ignore[arg-type]
    lab.adopt(start.pid)
    opts = HygieneOptions(device_globs=(lab.glob(),))
    watcher = Watcher(LiveHost, opts, WatchConfig(full_every=1000), lambda _e: None)
    for _ in range(3):  # seen as `bash -c ...`, read again once, then left alone
        watcher.run_once()
    with open(fifo, "w") as go:
        go.write("go\n")
    deadline = time.monotonic() + 30
    while not (ready.exists() and ready.read_text().endswith("\n")):
        assert time.monotonic() < deadline, "the engine child never started"
        time.sleep(0.02)
    engine = lab.adopt(int(ready.read_text()))
    rnd = watcher.run_once()
    assert engine not in _orphan_pids(rnd)


@pytest.mark.parametrize("auto_clean", [False, True])
def test_a_round_forced_to_a_full_look_runs_the_device_tools_once(
    lab: Lab, monkeypatch: pytest.MonkeyPatch, auto_clean: bool
) -> None:
    """npu-smi (seconds a call on an NPU host) logs each run: a round that finds a new
    orphan (or, with --auto-clean, may stop one) reads every process again, but keeps the
    tools' answer it got a moment before in that round; each other round runs them once,
    the periodic full look too. The orphan still shows the NPU memory npu-smi gave it."""
    node = lab.device_node()
    fe, engine, _worker = lab.server(node)
    log = fake_tools(
        lab.tmp / "bin", {"npu-smi info": npu_smi([3000], 65536, [(0, engine, "VLLM", 2000)])}
    )
    monkeypatch.setenv("PATH", f"{lab.tmp / 'bin'}:/bin:/usr/bin")
    opts = HygieneOptions(device_globs=(lab.glob(),), shm_dirs=(str(lab.tmp),))
    # --auto-clean scoped to the engine, confirmed over more rounds than are run: nothing
    # is stopped, but every round with the orphan may stop it (so is a full look)
    config = WatchConfig(
        full_every=3,
        auto_clean=auto_clean,
        clean_orphan_rounds=1000,
        scope=CleanFilters(pids=frozenset({engine})),
        journal=str(lab.tmp / "clean.jsonl"),
    )
    watcher = Watcher(LiveHost, opts, config, lambda _e: None)

    def runs(full: bool) -> object:
        log.path.unlink(missing_ok=True)
        rnd = watcher.run_once()
        assert watcher._state.last.full is full
        assert log.calls() == {"npu-smi info": 1}
        return rnd

    runs(True)  # the first full look
    runs(False)  # incremental
    runs(True)  # the periodic full look (every 3rd read)
    os.kill(fe, signal.SIGKILL)
    assert wait_gone(fe)
    rnd = runs(True)  # incremental, then forced to a full look by a new orphan
    check = next(c for c in rnd.report.checks if c.name == "orphan_engines")  # type: ignore[attr-defined]
    (orphan,) = [e for e in check.evidence if e["pid"] == engine]
    assert orphan["device_memory_bytes"] == 2000 * 2**20
    assert rnd.facts.device_sources == ("npu-smi",)  # type: ignore[attr-defined]
    runs(True)  # the periodic full look (the forced one was the 5th read, this the 6th)
    runs(auto_clean)  # a known orphan: a full look again only where it may be stopped


def test_what_auto_clean_removes_does_not_rest_on_the_device_tools() -> None:
    """Why a forced full look may keep its round's npu-smi answer: the clean plan (what
    --auto-clean stops and removes) is the same whatever the tools said, or if they failed.
    A plan that came to read them would make this fail, and the reuse need a second look."""
    fake = FakeHost()
    fake.proc(201, "VLLM::EngineCore", ppid=1, pgid=200, sid=200, fds={3: "/dev/davinci0"})
    fake.proc(301, "vllm serve b", ppid=1, pgid=301, fds={3: "/dev/davinci1"})
    fake.segment(7, 4096, cpid=201, nattch=1)
    fake.segment(8, 4096, cpid=999)  # its creator gone: leaked
    fake.shm_file("psm_deadbeef", 4096, 8, NOW - 3600, 11)
    fake.commands["npu-smi info"] = npu_smi(
        [3000, 3000], 65536, [(0, 201, "VLLM", 2000), (1, 301, "VLLM", 2000)]
    )
    opts = HygieneOptions()
    facts = read_facts(fake.host(), opts)
    assert facts.device_sources == ("npu-smi",) and facts.devices[0].processes
    plan = plan_clean(facts, opts)
    assert {a.kind for a in plan} == {"stop", "remove_segment", "remove_shm_file"}, plan
    silent = replace(facts, devices=(), device_sources=(), errors={"devices": "hung"})
    other = replace(facts, devices=facts.devices[1:])  # another moment's answer
    assert plan_clean(silent, opts) == plan == plan_clean(other, opts)


def test_a_look_given_its_rounds_tool_answer_runs_no_tool_and_keeps_what_it_said() -> None:
    """The answer kept is the tools' whole answer: their devices, which tools answered,
    and what went wrong (a failed npu-smi stays UNKNOWN, never an idle device); nothing
    else of the look is taken from it."""
    fake = FakeHost()
    fake.proc(201, "VLLM::EngineCore", ppid=1, pgid=200, sid=200, fds={3: "/dev/davinci0"})
    fake.commands["npu-smi info"] = {"stdout": "", "rc": 1}
    first = read_facts(fake.host(), HygieneOptions())
    assert first.errors["devices"] == "`npu-smi info` failed with status 1"
    counting = CountingHost(FakeHost().host())  # no process, no segment, no tool answer
    again = read_facts(counting, HygieneOptions(), tools_of=first)
    assert not [c for c in counting.commands if c.startswith(("npu-smi", "nvidia-smi"))]
    assert (again.devices, again.device_sources) == (first.devices, first.device_sources)
    assert again.errors["devices"] == first.errors["devices"]
    assert set(again.processes or ()) == {1, 900}  # read from the host, not kept


class _CountingHost(LiveHost):
    """The live host, counting which /proc/PID/<file> it read (by file name)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def read_file(self, path: str) -> str | None:
        name = path.rsplit("/", 1)[-1]
        self.reads[name] = self.reads.get(name, 0) + 1
        return super().read_file(path)


def test_a_steady_round_reads_no_process_cgroup_again() -> None:
    """Which container a process is in is read once per process (and again in each full
    look), not every round: reading every /proc/PID/cgroup each round cost a steady
    round 0.8x a bare full scan at the benchmark's load, more than all the rest."""
    sleepers = [subprocess.Popen(["sleep", "1000"]) for _ in range(20)]
    try:
        host = _CountingHost()
        watcher = Watcher(
            lambda: host, HygieneOptions(), WatchConfig(full_every=4), lambda _e: None
        )
        watcher.run_once()
        assert host.reads.get("cgroup", 0) >= len(sleepers)  # a full look reads each's
        watcher.run_once()
        host.reads.clear()
        watcher.run_once()  # round 3: incremental, little changed
        assert not watcher._state.last.full
        assert host.reads.get("cgroup", 0) <= watcher._state.last.new + 5, host.reads
        host.reads.clear()
        watcher.run_once()  # round 4: a full look reads them all again
        assert watcher._state.last.full
        assert host.reads.get("cgroup", 0) >= len(sleepers)
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_cost_metrics_count_rounds_and_full_scans() -> None:
    watcher = Watcher(LiveHost, HygieneOptions(), WatchConfig(full_every=2), lambda _e: None)
    for _ in range(3):
        watcher.run_once()
    text = generate_latest(watcher.registry).decode()
    # round 1 (the first) and round 2 (every 2nd) read everything; round 3 what changed
    assert "accelhost_watch_full_scans_total 2.0" in text
    assert "accelhost_watch_cpu_seconds_total" in text
    assert "accelhost_watch_last_round_duration_seconds" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--full-every", "0"], "--full-every must be at least 1"),
        (["--interval", "0.05"], "--interval must be at least 0.1 seconds"),
    ],
)
def test_bad_watch_cadence_is_a_usage_error(args: list[str], message: str) -> None:
    res = run_cli("watch", "--metrics-addr", "none", "--rounds", "1", *args)
    assert res.returncode == 2 and message in res.stderr


def test_incremental_state_is_bounded_by_what_exists(shm_dir: Path) -> None:
    """Processes and files come and go for many rounds: what the state keeps is what
    exists now, not what ever existed (memory bounded by the host, not by time)."""
    import gc
    import tracemalloc

    host = LiveHost()
    state = IncrementalState(_options(shm_dir), full_every=7)
    for _ in range(3):
        state.read(host, host, time.time())

    def churn(n: int) -> None:
        sleeper = subprocess.Popen(["sleep", "1000"])
        try:
            (shm_dir / f"psm_churn{n}").write_bytes(b"x")
            state.read(host, host, time.time())
        finally:
            sleeper.kill()
            sleeper.wait()
        (shm_dir / f"psm_churn{n}").unlink()
        state.read(host, host, time.time())

    for n in range(10):
        churn(n)
    gc.collect()
    existed = sum(n.isdigit() for n in os.listdir("/proc"))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(10, 60):
            churn(n)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        exist_after = sum(n.isdigit() for n in os.listdir("/proc"))
    finally:
        tracemalloc.stop()
    known = state.read(host, host, time.time())
    now = {int(n) for n in os.listdir("/proc") if n.isdigit()}
    assert len(set(known.processes) - now) < 20  # only what exited since that round
    assert not any(f.name.startswith("psm_churn") for f in known.shm_files[str(shm_dir)] or ())
    # the state is bounded by the host: processes that other work on this machine started
    # meanwhile may each be remembered (a few KiB each), what came and went may not
    more = max(0, exist_after - existed)
    assert grown < 256 * 1024 + more * 8 * 1024, (grown, more)


def test_a_process_hidden_from_the_reader_may_hold_any_file() -> None:
    """/proc lists pid 60 but will not describe it (hidepid, a non-root reader): a round
    cannot tell who holds an old engine file then, so it is never judged leaked."""
    from accelhost.host.base import FileStat
    from accelhost.hygiene.judge.rules import judge_shm_file
    from fakehost import FakeMachine

    old = FileStat("psm_x", "file", 4096, 8, 0, "root", 1000.0, 1000.0, 1, 7)
    host = FakeMachine(
        files={"/proc/self/status": "CapPrm:\t0\nCapEff:\t0\n"},
        stats={
            "/proc/60": FileStat("60", "dir", 0, 0, 0, "root", 0.0, 0.0, 1, 60),
            "/shm/psm_x": old,
        },
    ).host()

    class Lister:
        def list_dir_inodes(self, path: str) -> dict[str, int]:
            return {"/proc": {"60": 60}, "/shm": {"psm_x": 7}}[path]

        def birth_time(self, path: str) -> float | None:
            return None

    state = IncrementalState(_options(Path("/shm")), full_every=1000)
    known = state.read(host, Lister(), 5000.0)
    assert 60 in known.hidden and known.held.unreadable == (60,)
    (f,) = known.shm_files["/shm"] or ()
    verdict = judge_shm_file(f, known.held, 5000.0, 60.0, "vLLM")
    assert verdict.blocked and not verdict.leaked
