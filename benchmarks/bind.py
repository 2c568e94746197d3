"""Binding a 500-thread process: accelhost against `taskset -acp`, in one run, as ratios.

    .venv/bin/python benchmarks/bind.py [--threads 500] [--repeat 15] [--json]

Measured on the same child process, alternating between two CPU sets so that every run
really changes every thread:
  accelhost (library)  the one bind driver (`accelhost.apply.driver.bind`): build the
                       thread steps (list /proc/PID/task, read every comm, assign roles),
                       execute them (sched_setaffinity + read-back per thread), list the
                       task directory once more for threads born meanwhile: what
                       `bind_current_process`, `accelhost bind` and `run --bind` do.
  system calls only    the system calls the library path cannot do without, in a bare
                       loop: open/read/close of every comm, sched_setaffinity and the
                       read-back per thread. The floor: what is left above it is Python.
  taskset -acp         one `taskset -acp CPUS PID` from Python (what the reference runs),
                       with no role threads at all.
  reference path       `taskset -acp` + `ps -Te` + one `taskset -cp` per ACL/release thread,
                       the reference's full sequence for the same result.
  accelhost bind (CLI) the whole command in a new interpreter, for completeness.
Medians of --repeat runs, taken in turns; the ratio is baseline / accelhost (above 1:
accelhost is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

CHILD = r"""
import sys, threading
threading.stack_size(256 * 1024)
stop = threading.Event()
def run(name, ready):
    with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
        fh.write(name)
    ready.set()
    stop.wait()
names = ["acl_thread", "release_thread"] + [f"worker{i}" for i in range(int(sys.argv[1]) - 3)]
for name in names:
    ready = threading.Event()
    threading.Thread(target=run, args=(name, ready), daemon=True).start()
    ready.wait()
print("ready", flush=True)
sys.stdin.read()
stop.set()
"""


def interleaved(contenders: dict[str, Callable[[int], None]], repeat: int) -> dict[str, float]:
    """Median ms of each contender, run in turns so that a busy machine slows all alike."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for i in range(repeat):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn(i)
            samples[name].append((time.perf_counter() - start) * 1000.0)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=500, help="threads in the process")
    ap.add_argument("--repeat", type=int, default=41)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from accelhost.apply import driver
    from accelhost.apply.build import BindOptions
    from accelhost.plans import Plan

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("needs at least 2 CPUs", file=sys.stderr)
        return 1
    taskset = shutil.which("taskset")
    ps = shutil.which("ps")
    a, b = cpus[0], cpus[1]
    # Two plans that swap CPUs, so every run moves every thread.
    plans = [
        Plan.from_dict({"devices": {"0": {"main": [a], "acl": [b], "release": [b]}}}),
        Plan.from_dict({"devices": {"0": {"main": [b], "acl": [a], "release": [a]}}}),
    ]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(args.threads)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    results: dict[str, float] = {}
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        pid = child.pid
        nthreads = len(os.listdir(f"/proc/{pid}/task"))
        options = BindOptions(pid=pid, memory=False, irq=False)

        def ours(i: int) -> None:
            # The one driver every entry point calls (with its retry listing of new threads).
            done = driver.bind(plans[i % 2], 0, options, any_arch=True).results
            assert all(r.status == "ok" for r in done), [r.line for r in done if r.status != "ok"]

        def floor(i: int) -> None:
            cpu = {(a, b)[i % 2]}
            dfd = os.open(f"/proc/{pid}/task", os.O_RDONLY | os.O_DIRECTORY)
            try:
                tids = os.listdir(dfd)
                for entry in tids:
                    fd = os.open(f"{entry}/comm", os.O_RDONLY, dir_fd=dfd)
                    os.read(fd, 64)
                    os.close(fd)
                for entry in tids:
                    os.sched_setaffinity(int(entry), cpu)
                    os.sched_getaffinity(int(entry))
            finally:
                os.close(dfd)

        contenders: dict[str, Callable[[int], None]] = {
            "accelhost (library)": ours,
            "system calls only (floor)": floor,
        }
        if taskset:

            def plain(i: int) -> None:
                cpu = (a, b)[i % 2]
                subprocess.run(
                    [taskset, "-acp", str(cpu), str(pid)], capture_output=True, check=True
                )

            contenders["taskset -acp"] = plain
        if taskset and ps:

            def reference(i: int) -> None:
                main_cpu, role_cpu = ((a, b), (b, a))[i % 2]
                subprocess.run(
                    [taskset, "-acp", str(main_cpu), str(pid)], capture_output=True, check=True
                )
                out = subprocess.run([ps, "-Te"], capture_output=True, text=True, check=True).stdout
                for line in out.splitlines():
                    if "acl_thread" in line or "release_thread" in line:
                        tid = line.split()[1]
                        subprocess.run(
                            [taskset, "-cp", str(role_cpu), tid], capture_output=True, check=True
                        )

            contenders["reference path (taskset+ps)"] = reference
        for i in range(2):  # warm the page cache and dentries for everyone
            for fn in contenders.values():
                fn(i)
        results.update(interleaved(contenders, args.repeat))

        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for n, plan in enumerate(plans):
                path = os.path.join(tmp, f"plan{n}.json")
                with open(path, "w") as fh:
                    json.dump(plan.to_dict(), fh)
                paths.append(path)

            def cli(i: int) -> None:
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "accelhost.cli.main",
                        "bind",
                        "--plan",
                        paths[i % 2],
                        "--device",
                        "0",
                        "--pid",
                        str(pid),
                        "--no-memory",
                        "--no-irq",
                    ],
                    capture_output=True,
                    check=True,
                )

            results.update(interleaved({"accelhost bind (CLI)": cli}, max(3, args.repeat // 5)))
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    base = results["accelhost (library)"]
    ratios = {k: v / base for k, v in results.items()}
    if args.json:
        print(
            json.dumps(
                {"threads": nthreads, "median_ms": results, "ratio_vs_accelhost_library": ratios},
                indent=2,
            )
        )
        return 0
    print(f"binding a process with {nthreads} threads, median of {args.repeat} runs in turns")
    width = max(len(k) for k in results)
    for name, ms in results.items():
        print(f"  {name:<{width}}  {ms:8.2f} ms   {ratios[name]:5.2f}x accelhost (library)")
    if "taskset -acp" in results:
        print(
            f"accelhost (library) is {results['taskset -acp'] / base:.2f}x as fast as "
            "taskset -acp (ratio > 1: faster)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
