"""`watch` and `doctor` at fleet load, as ratios to one bare full scan measured in the same run.

Builds issue 19's load on this machine: 2,000 extra processes (sleeping children forked by
a few Python parents, most holding two files open and mapped, plus `sleep` processes)
and 3,000 files (nine in ten held, half named like vLLM's psm_*) in a private directory
(`--shm-dir`, default a fresh directory under /dev/shm), then reports in one run:

- `doctor --brief` wall time on the idle host (measured first, before the load exists);
- the bare full scan's CPU: each process's stat, cmdline, fd links and maps, in plain Python;
- watch's CPU per round, steady state and with churn (processes killed and forked, files
  created, rewritten and removed between rounds), and how many of its rounds were full scans;
- the time from an engine frontend's death to its orphan's FAIL in /metrics (`--interval 60`);
- a full doctor's wall and CPU time (a fresh `python -m accelhost doctor` process: the
  interpreter's start and imports included), and its look alone (read and checks).

Run as root on Linux: `.venv/bin/python benchmarks/watch.py` (about a minute on 2 cores).
Every process it starts is killed by pid and every file it made removed, even on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from accelhost.host.live import live_host
from accelhost.hygiene.doctor.checks import run_checks
from accelhost.hygiene.facts.host import read_facts
from accelhost.hygiene.options import DEFAULT_SHM_DIRS, HygieneOptions
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher

# A parent that forks sleeping children on request ("N [FILE ...]"), child i holding
# files 2i and 2i+1 open and mapped; it ignores SIGCHLD so killed children leave no zombie.
PARENT = r"""
import mmap, os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
for line in sys.stdin:
    n, *paths = line.split()
    pids = []
    for i in range(int(n)):
        pid = os.fork()
        if pid == 0:
            held = []
            for path in paths[2 * i : 2 * i + 2]:
                fd = os.open(path, os.O_RDWR)
                held.append(mmap.mmap(fd, 4096))
            while True:
                signal.pause()
        pids.append(pid)
    print(" ".join(map(str, pids)), flush=True)
"""


@dataclass
class Load:
    """Everything the benchmark started or made, torn down by id."""

    shm_dir: Path
    own_dir: bool
    parents: list[subprocess.Popen[str]] = field(default_factory=list)
    sleepers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    children: list[int] = field(default_factory=list)
    holders: set[int] = field(default_factory=set)  # children holding files
    files: list[Path] = field(default_factory=list)

    def fork(self, parent: int, n: int, paths: list[Path] = ()) -> list[int]:  # type: ignore[assignment]
        p = self.parents[parent]
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(f"{n} {' '.join(map(str, paths))}\n")
        p.stdin.flush()
        pids = [int(x) for x in p.stdout.readline().split()]
        self.children.extend(pids)
        self.holders.update(pids[: (len(paths) + 1) // 2])
        return pids

    def kill_child(self, pid: int) -> None:
        """SIGKILL one child and wait until /proc no longer lists it (its parent reaps it)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        self.children.remove(pid)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.01)

    def teardown(self) -> None:
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for p in self.parents:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
            p.wait()
        for s in self.sleepers:
            with contextlib.suppress(ProcessLookupError):
                s.kill()
            s.wait()
        for f in self.files:
            with contextlib.suppress(FileNotFoundError):
                f.unlink()
        if self.own_dir:
            shutil.rmtree(self.shm_dir, ignore_errors=True)


def bare_scan() -> int:
    """What any full scan must read at least: stat, cmdline, fd links and maps of each process."""
    n = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        base = f"/proc/{name}"
        try:
            with open(f"{base}/stat", "rb") as f:
                f.read()
            with open(f"{base}/cmdline", "rb") as f:
                f.read()
            for fd in os.listdir(f"{base}/fd"):
                with contextlib.suppress(OSError):
                    os.readlink(f"{base}/fd/{fd}")
            with open(f"{base}/maps", "rb") as f:
                f.read()
        except OSError:
            continue
        n += 1
    return n


def cpu_of(fn: object) -> float:
    t0 = time.process_time()
    fn()  # type: ignore[operator]
    return time.process_time() - t0


def doctor_times(args: list[str]) -> tuple[float, float]:
    """(wall, CPU) of one fresh `accelhost doctor` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "accelhost", "doctor", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def build(load: Load, procs: int, files: int) -> None:
    for n in range(files):
        name = f"psm_bench{n:05d}" if n % 2 == 0 else f"app-bench-{n:05d}.dat"
        path = load.shm_dir / name
        path.write_bytes(b"\0" * 4096)
        old = time.time() - 3600  # made an hour ago, like most files on a busy node
        os.utime(path, (old, old))
        load.files.append(path)
    parents = 4
    for _ in range(parents):
        load.parents.append(
            subprocess.Popen(
                [sys.executable, "-c", PARENT],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    forked = procs * 3 // 4
    holders = load.files[: files * 9 // 10]
    per = forked // parents
    for i in range(parents):
        load.fork(i, per, holders[i * len(holders) // parents : (i + 1) * len(holders) // parents])
    for _ in range(procs - per * parents - parents):
        load.sleepers.append(
            subprocess.Popen(
                ["sleep", "100000"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )


def churn(load: Load, step: int) -> None:
    """Between two rounds: 20 children that hold no file die and 20 are born, 30 files come,
    30 change, 30 unheld ones go (a fork-heavy neighbour; a holder's death is measured apart)."""
    for pid in [p for p in load.children if p not in load.holders][:20]:
        load.kill_child(pid)
    load.fork(step % len(load.parents), 20)
    for n in range(30):
        path = load.shm_dir / f"psm_churn{step:03d}_{n:02d}"
        path.write_bytes(b"\1" * 4096)
        load.files.append(path)
    for path in load.files[-90:-60]:
        with contextlib.suppress(FileNotFoundError):
            path.write_bytes(b"\2" * 4096)
    for path in load.files[2700:2730]:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    del load.files[2700:2730]


def orphans_in(metrics: bytes) -> int:
    """accelhost_orphan_processes in a scrape (other orphans may already be on the host)."""
    for line in metrics.decode().splitlines():
        if line.startswith("accelhost_orphan_processes "):
            return int(float(line.split()[1]))
    return 0


def reaction_time(options: HygieneOptions) -> float | None:
    """Seconds from a fake engine frontend's SIGKILL to its orphan's FAIL in the watch's
    metrics (one more orphan counted), with `--interval 60` (None when not seen within 10 s)."""
    from prometheus_client.exposition import generate_latest

    script = (
        "(exec -a VLLM::EngineCore sleep 1000 >/dev/null 2>&1 </dev/null) & "
        "echo $!; exec -a 'vllm serve bench' sleep 1000"
    )
    front = subprocess.Popen(["setsid", "bash", "-c", script], stdout=subprocess.PIPE, text=True)
    assert front.stdout is not None
    engine = int(front.stdout.readline())
    watcher = Watcher(live_host, options, WatchConfig(interval_s=60.0), lambda _e: None)
    stop = threading.Event()
    thread = threading.Thread(target=watcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while watcher.collector.rounds_done() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the round is over: what follows is the next interval's business
        before = orphans_in(generate_latest(watcher.registry))
        killed = time.monotonic()
        front.kill()
        front.wait()
        while time.monotonic() - killed < 10:
            if orphans_in(generate_latest(watcher.registry)) > before:
                return time.monotonic() - killed
            time.sleep(0.05)
        return None
    finally:
        stop.set()
        with contextlib.suppress(ProcessLookupError):
            os.kill(engine, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            front.kill()
        front.wait()
        thread.join(timeout=70)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--procs", type=int, default=2000)
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=6, help="watch rounds per phase")
    ap.add_argument("--shm-dir", help="a tmpfs directory to fill (default: one under /dev/shm)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (every process's fds and maps)", file=sys.stderr)
        return 2
    brief = sorted(doctor_times(["--brief"])[0] for _ in range(5))
    own = args.shm_dir is None
    shm_dir = Path(tempfile.mkdtemp(prefix="accelhost-bench-", dir="/dev/shm")) if own else None
    load = Load(shm_dir or Path(args.shm_dir), own)
    try:
        started = time.perf_counter()
        build(load, args.procs, args.files)
        built = time.perf_counter() - started
        options = HygieneOptions(shm_dirs=(*DEFAULT_SHM_DIRS, str(load.shm_dir)))
        nproc = sum(e.isdigit() for e in os.listdir("/proc"))
        bare = statistics.median(cpu_of(bare_scan) for _ in range(3))
        watcher = Watcher(live_host, options, WatchConfig(interval_s=30.0), lambda _e: None)
        first = cpu_of(watcher.run_once)
        warmup = cpu_of(watcher.run_once)  # every process is new once: read again once
        steady = [cpu_of(watcher.run_once) for _ in range(args.rounds)]
        churned = []
        for step in range(args.rounds):
            churn(load, step)
            churned.append(cpu_of(watcher.run_once))
        holder_death = []
        for _ in range(2):
            load.kill_child(next(p for p in load.children if p in load.holders))
            holder_death.append(cpu_of(watcher.run_once))
        full_rounds = watcher.collector.full_scans()
        doc = [doctor_times(["--shm-dir", str(load.shm_dir), "--json"]) for _ in range(3)]
        look = statistics.median(
            cpu_of(lambda: run_checks(read_facts(live_host(), options), options)) for _ in range(3)
        )
        doc_wall = statistics.median(w for w, _ in doc)
        doc_cpu = statistics.median(c for _, c in doc)
        bare_wall_t0 = time.perf_counter()
        bare_scan()
        bare_wall = time.perf_counter() - bare_wall_t0
        react = reaction_time(options)
        st, ch = statistics.median(steady), statistics.median(churned)
        print(f"machine: {os.cpu_count()} CPUs, {os.uname().release}; load built in {built:.1f} s")
        print(
            f"load: {nproc} processes, {len(load.files)} files in {load.shm_dir} "
            f"(+{len(os.listdir('/dev/shm'))} entries in /dev/shm)"
        )
        print(f"doctor --brief, idle host:   median {brief[2] * 1e3:7.0f} ms wall")
        print(
            f"bare full scan:              {bare * 1e3:7.0f} ms CPU ({bare_wall * 1e3:.0f} ms wall)"
        )
        print(f"watch first round:           {first * 1e3:7.0f} ms CPU  {first / bare:5.2f}x bare")
        print(
            f"watch second round:          {warmup * 1e3:7.0f} ms CPU  {warmup / bare:5.2f}x bare"
        )
        print(f"watch round, steady:         {st * 1e3:7.0f} ms CPU  {st / bare:5.2f}x bare")
        print(f"watch round, churn:          {ch * 1e3:7.0f} ms CPU  {ch / bare:5.2f}x bare")
        hd = statistics.median(holder_death)
        print(f"watch round, a holder died:  {hd * 1e3:7.0f} ms CPU  {hd / bare:5.2f}x bare")
        print(
            f"rounds that read every process's fds and maps: {full_rounds} of "
            f"{4 + 2 * args.rounds} (the first, every --full-every, a holder's death)"
        )
        print(
            f"doctor (fresh process):      {doc_wall * 1e3:7.0f} ms wall "
            f"{doc_wall / bare_wall:5.2f}x bare wall; {doc_cpu * 1e3:.0f} ms CPU "
            f"{doc_cpu / bare:5.2f}x bare"
        )
        print(
            f"doctor's look (read + checks, in this process): {look * 1e3:.0f} ms CPU "
            f"{look / bare:5.2f}x bare"
        )
        shown = "not seen in 10 s" if react is None else f"{react:.2f} s"
        print(f"engine death -> FAIL (--interval 60): {shown}")
        return 0
    finally:
        load.teardown()


if __name__ == "__main__":
    sys.exit(main())
