"""What `accelhost run` costs: CPU while idle, and the time to tear down a stubborn tree.

    python benchmarks/supervisor.py [--seconds 60] [--procs 200] [--grace 2] [--json]

1. Idle: `accelhost run -- sleep` (and the same with `--fail-on-exit`, which rescans /proc
   every --scan-interval) for --seconds; CPU time of the supervisor from
   /proc/PID/schedstat (nanoseconds), as a share of one core. Aim: under 0.1 %.
   Then the same while a process outside the tree forks as fast as it can (`sh` running
   `/bin/true` in a loop): as root the supervisor reads the kernel's process events (every fork
   on the host, in batches), so this is its worst case; the baseline is `--keep-shm`
   (no events read) under the same load, measured in the same run; `idle_keep_shm` is the
   same baseline without the forker (what other work on the host forks still counts).
2. Teardown: a command that starts --procs processes ignoring SIGTERM (direct children,
   double-forked orphans and setsid escapees, a third each); SIGTERM to the supervisor,
   time until it has exited (everything killed and reaped). Aim: grace + under 1 s.
Processes are cleaned up by pid even when a measurement fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TREE = r"""
import os, signal, sys, time
n, ready = int(sys.argv[1]), sys.argv[2]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
r, w = os.pipe()
def stubborn():
    os.close(r)
    os.write(w, b".")
    os.close(w)
    while True:
        signal.pause()
for i in range(n):
    kind = i % 3
    pid = os.fork()
    if pid == 0:
        if kind == 0:
            stubborn()
        if kind == 2:
            os.setsid()
        if os.fork() == 0:
            stubborn()
        os._exit(0)
    if kind:
        os.waitpid(pid, 0)
os.close(w)
got = 0
while got < n:
    got += len(os.read(r, 4096))
open(ready, "w").write("ready")
while True:
    signal.pause()
"""


def supervisor_argv(*options: str) -> list[str]:
    return [sys.executable, "-m", "accelhost.cli.main", "run", "-q", *options]


def cpu_ns(pid: int) -> int:
    """CPU time of the process's threads so far, in nanoseconds."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            total += int(fh.read().split()[0])
    return total


def descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                text = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            kids.setdefault(int(text[text.rfind(")") + 2 :].split()[1]), []).append(int(name))
    out, frontier = [], [root]
    while frontier:
        frontier = [c for p in frontier for c in kids.get(p, [])]
        out += frontier
    return out


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        for pid in descendants(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
    proc.wait()


def idle(seconds: float, options: list[str], forking: bool = False) -> dict[str, float]:
    # /bin/true, not the builtin `true`: every round is a real fork, exec and exit.
    loop = ["sh", "-c", "while :; do /bin/true; done"]
    forker = subprocess.Popen(loop) if forking else None
    try:
        return _idle(seconds, options)
    finally:
        if forker is not None:
            kill_tree(forker)


def _idle(seconds: float, options: list[str]) -> dict[str, float]:
    proc = subprocess.Popen(supervisor_argv(*options, "--", "sleep", str(int(seconds) + 30)))
    try:
        time.sleep(2.0)  # past start-up (imports) and the first fast rescans
        t0, c0 = time.monotonic(), cpu_ns(proc.pid)
        time.sleep(seconds)
        t1, c1 = time.monotonic(), cpu_ns(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            kill_tree(proc)
    cpu_s = (c1 - c0) / 1e9
    return {"seconds": t1 - t0, "cpu_s": cpu_s, "core_percent": 100.0 * cpu_s / (t1 - t0)}


def teardown(procs: int, grace: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="accelhost-bench-") as tmp:
        ready = Path(tmp) / "ready"
        argv = supervisor_argv("--grace", str(grace), "--", sys.executable, "-c", TREE)
        proc = subprocess.Popen([*argv, str(procs), str(ready)])
        try:
            deadline = time.monotonic() + 120
            while not ready.exists():
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("the tree did not start")
                time.sleep(0.05)
            count = len(descendants(proc.pid))
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(grace + 60)
            elapsed = time.monotonic() - t0
        finally:
            kill_tree(proc)
    return {
        "processes": count,
        "grace_s": grace,
        "teardown_s": elapsed,
        "over_grace_s": elapsed - grace,
        "status": status,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="idle measurement (default 60)")
    ap.add_argument("--procs", type=int, default=200, help="stubborn processes (default 200)")
    ap.add_argument("--grace", type=float, default=2.0, help="teardown grace (default 2)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    results = {
        "idle_keep_shm": idle(args.seconds, ["--keep-shm"]),
        "idle": idle(args.seconds, []),
        "idle_fail_on_exit": idle(args.seconds, ["--fail-on-exit", "VLLM::EngineCore"]),
        "forking_baseline_keep_shm": idle(args.seconds, ["--keep-shm"], forking=True),
        "forking_with_events": idle(args.seconds, [], forking=True),
        "teardown": teardown(args.procs, args.grace),
    }
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    names = (
        "idle_keep_shm",
        "idle",
        "idle_fail_on_exit",
        "forking_baseline_keep_shm",
        "forking_with_events",
    )
    for name in names:
        r = results[name]
        aim = " (aim < 0.1 % on a quiet host)" if name.startswith("idle") else ""
        print(
            f"{name:26} {r['cpu_s'] * 1000:8.2f} ms CPU in {r['seconds']:.1f} s "
            f"= {r['core_percent']:.4f} % of one core{aim}"
        )
    t = results["teardown"]
    print(
        f"{'teardown':26} {int(t['processes'])} processes ignoring SIGTERM, grace "
        f"{t['grace_s']:g} s: {t['teardown_s']:.2f} s (grace + {t['over_grace_s']:.2f} s, "
        f"aim < 1 s), exit status {int(t['status'])}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
