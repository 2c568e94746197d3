"""Device-holder scan vs `fuser -v` on the same device nodes, as a ratio in one run.

Adds 1,000 sleeping processes to this machine (ten of them holding a scratch device node
made with mknod, /dev/null's numbers), then alternates the two scans and compares medians.
Run as root on Linux: `.venv/bin/python benchmarks/holders.py`. Every process it starts
is killed by pid at the end, even on failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from accelhost.host.live import LiveHost
from accelhost.hygiene.facts.devices import scan_device_holders
from accelhost.hygiene.facts.host import read_facts
from accelhost.hygiene.options import HygieneOptions
from accelhost.parsers.devnodes import is_device_node

EXTRA = 1000
HOLDERS = 10
ROUNDS = 7


def main() -> int:
    if os.geteuid() != 0 or shutil.which("fuser") is None:
        print("needs root and fuser (psmisc)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="accelhost-bench-"))
    node = tmp / "davinci_bench0"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with open(node, "rb") as held:
            for n in range(EXTRA):
                procs.append(
                    subprocess.Popen(
                        ["sleep", "100000"],
                        stdin=held if n < HOLDERS else subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
        options = HygieneOptions(device_globs=(str(node),))
        here = glob.glob("/dev/**", recursive=True)
        nodes = sorted({p for p in here if is_device_node(p)} | {str(node)})
        host = LiveHost()

        def ours() -> set[int]:
            return set(scan_device_holders(host, options))

        def full() -> set[int]:
            return set(read_facts(host, options).device_fds)

        def fuser() -> set[int]:
            res = subprocess.run(["fuser", *nodes], capture_output=True, text=True, check=False)
            return {
                int(t.rstrip("cefFrm")) for t in res.stdout.split() if t.rstrip("cefFrm").isdigit()
            }

        def fuser_v() -> None:
            subprocess.run(["fuser", "-v", *nodes], capture_output=True, check=False)

        a, b = ours(), fuser()
        expected = {p.pid for p in procs[:HOLDERS]}
        assert expected <= a, "scan missed a holder"
        assert expected <= b, "fuser missed a holder"
        if a != b:  # a container's own /dev node of the same name: fuser sees the host's only
            print(f"note: scan and fuser differ beyond this benchmark's holders: {sorted(a ^ b)}")
        times: dict[str, list[float]] = {"scan": [], "doctor_read": [], "fuser_v": []}
        for _ in range(ROUNDS):
            for name, fn in (("scan", ours), ("fuser_v", fuser_v), ("doctor_read", full)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in times.items()}
        n_procs = len(os.listdir("/proc"))
        print(
            f"processes on this machine: ~{sum(e.isdigit() for e in os.listdir('/proc'))} "
            f"({n_procs} /proc entries), device nodes: {len(nodes)}, holders found: {len(a)}"
        )
        print(f"fuser -v (baseline)      median {med['fuser_v'] * 1e3:8.1f} ms")
        print(
            f"holder scan (fds only)   median {med['scan'] * 1e3:8.1f} ms   "
            f"ratio {med['scan'] / med['fuser_v']:.2f}x fuser"
        )
        print(
            f"doctor read (stat+fds)   median {med['doctor_read'] * 1e3:8.1f} ms   "
            f"ratio {med['doctor_read'] / med['fuser_v']:.2f}x fuser"
        )
        return 0
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
