"""A test run again in namespaces of its own, for tests whose `watch --auto-clean` acts on
whatever orphan engine or leaked engine file it can see.

Such a watch cannot be limited to one test's engines from its command line, and on a
shared machine it would stop other work's orphans (a first version of the soak, run on
the host, stopped the stand-in orphans of a unit test running beside it). So the test
re-runs itself (`pytest FILE::TEST` with `ISOLATED=1`) under `unshare --pid --fork
--kill-child --mount-proc --mount --propagation private` (and `--ipc` if asked), `tini` as
the namespace's PID 1, with a private tmpfs mounted on /dev/shm: everything the test
starts (servers, its own Docker daemon or containerd, their containers) is in there, a
watch there sees nothing else, and when PID 1 exits the kernel kills whatever is left in
the namespace and the tmpfs goes with it.

The kernel's process events reach only the initial PID namespace: a watch in there falls
back to rounds (it says so, `accelhost_watch_fallback{source="process_events"}`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hostcli import accelhost, check, paths_named, pids_named

ISOLATED = "AH_E2E_ISOLATED"
REPO = Path(__file__).resolve().parents[2]


def inside() -> bool:
    """Whether this process is the re-run, inside the namespaces."""
    return os.environ.get(ISOLATED) == "1"


def run_isolated(
    test_file: str, test: str, tmp_path: Path, timeout: float, ipc: bool = False
) -> None:
    """`test_file::test` again, in a PID and mount (and with `ipc`, IPC) namespace of its
    own with a private /dev/shm; its output is printed and its failure is this test's."""
    for tool in ("unshare", "tini", "mount"):
        assert shutil.which(tool), f"an isolated test needs {tool} (util-linux; Debian's tini)"
    inner = [
        sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
        "--basetemp", str(tmp_path / "inner"), f"{test_file}::{test}",
    ]  # fmt: skip
    script = 'mount -t tmpfs -o size=4g,mode=1777 ah-isolated-shm /dev/shm && exec "$@"'
    argv = [
        "unshare", "--pid", "--fork", "--kill-child", "--mount-proc",
        "--mount", "--propagation", "private", *(["--ipc"] if ipc else []),
        "tini", "-s", "--", "sh", "-c", script, "sh", *inner,
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        argv,
        env={**os.environ, ISOLATED: "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    # (past the timeout, subprocess kills unshare, and --kill-child then the namespace)
    kept = [ln for ln in done.stdout.splitlines() if "it/s]" not in ln]
    print("\n".join(kept[-80:]))
    print(f"{test} in its namespace: {time.monotonic() - started:.0f} s, exit {done.returncode}")
    assert done.returncode == 0, "\n".join(kept[-200:]) + done.stderr[-3000:]


def nothing_to_clean_before(shm_min_age: float) -> None:
    """Fail loudly (never skip) if watch --auto-clean would act on someone else's leftovers."""
    doctor = accelhost("doctor", "--json", "--shm-min-age", str(shm_min_age))
    assert doctor.data is not None, doctor.explain()
    orphans = pids_named(check(doctor.data, "orphan_engines")["evidence"])
    leaked = paths_named(check(doctor.data, "posix_shm")["evidence"])
    assert not orphans and not leaked, (
        "this host already has orphan engines or leaked engine files that watch --auto-clean "
        f"would remove (it cannot be limited to this test's): orphans {sorted(orphans)}, "
        f"files {sorted(leaked)}; the test does not run here"
    )
