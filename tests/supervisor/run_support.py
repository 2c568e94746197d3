"""Shared helpers of the `accelhost run` tests: start the supervisor, find and clean up
exactly the processes and segments a test made (by pid and shmid, never by name)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

HELPER = str(Path(__file__).with_name("tree_helper.py"))
PY = sys.executable


def run_cmd(*options: str) -> list[str]:
    """The argv of `accelhost run OPTIONS` (the part before `--`)."""
    return [PY, "-m", "accelhost.cli.main", "run", *options]


def helper(mode: str, out: Path, *flags: str) -> list[str]:
    return [PY, HELPER, mode, str(out), *flags]


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def state(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2]


def ours_alive(pid: int, marker: str) -> bool:
    """The pid is still one of this test's processes (and not a zombie)."""
    return marker in cmdline(pid) and state(pid) not in (None, "Z")


def recorded_pids(out: Path) -> list[int]:
    d = out / "pids"
    return sorted(int(p.name) for p in d.iterdir()) if d.is_dir() else []


def wait_for(predicate: object, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def descendants_of(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            text = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        ppid = int(text[text.rfind(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    out, frontier = [], [root]
    while frontier:
        nxt = [c for p in frontier for c in kids.get(p, [])]
        out += nxt
        frontier = nxt
    return out


class Janitor:
    """Kills by pid whatever a test started and removes by shmid what it created."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.procs: list[subprocess.Popen[bytes]] = []
        self.shmids: list[int] = []

    def start(
        self, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.procs.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                for pid in descendants_of(proc.pid):
                    if self.marker in cmdline(pid):
                        with contextlib.suppress(OSError):
                            os.kill(pid, signal.SIGKILL)
                proc.kill()
            proc.wait(10)
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()
        for pid in recorded_pids(Path(self.marker)):
            if ours_alive(pid, self.marker):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        for shmid in self.shmids:
            if shmid in live_shmids():
                with contextlib.suppress(OSError):
                    remove_shm(shmid)


@contextlib.contextmanager
def janitor(tmp_path: Path) -> Iterator[Janitor]:
    j = Janitor(str(tmp_path))
    try:
        yield j
    finally:
        j.cleanup()


def live_shmids() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[1]) for line in lines if line.strip()}


def remove_shm(shmid: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    if libc.shmctl(shmid, 0, None) != 0:
        raise OSError(ctypes.get_errno(), "shmctl")
