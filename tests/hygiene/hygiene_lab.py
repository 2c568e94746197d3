"""Real processes, device nodes and SysV segments for the hygiene tests.

Everything a test starts or creates is removed by its id (pid, shmid) in a finalizer,
even when the test fails; nothing is ever killed by name.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PY = sys.executable

# glibc's sem_open(O_CREAT) step by step, in any directory (sem_open itself only makes
# them in /dev/shm): a temporary file, mapped, linked to the semaphore's name, the
# temporary name unlinked. Its maker then maps the semaphore only as the deleted
# temporary name, as each vLLM Worker maps its sem.mp-*. Prepended to a `python -c` script.
MAKE_SEM_PY = r"""
import mmap, os
def make_sem(path):
    tmp = os.path.join(os.path.dirname(path), "sem.tmpXYZ")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, bytes(32))
    sem = mmap.mmap(fd, 32)
    os.close(fd)
    os.link(tmp, path)
    os.unlink(tmp)
    return sem
"""

# A helper process: create (and optionally attach) a segment, print its shmid, then
# either exit or sleep. Run with `python -c`.
SHM_HELPER = r"""
import ctypes, ctypes.util, sys, time
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmat.restype = ctypes.c_void_p
mode, arg = sys.argv[1], int(sys.argv[2])
if mode == "attach":
    shmid = arg
else:
    shmid = libc.shmget(0, arg, 0o1000 | 0o600)
    if shmid < 0:
        sys.exit("shmget failed: %d" % ctypes.get_errno())
if mode in ("attach", "create-attach"):
    if libc.shmat(shmid, None, 0) in (None, ctypes.c_void_p(-1).value):
        sys.exit("shmat failed: %d" % ctypes.get_errno())
print(shmid, flush=True)
if mode != "create-exit":
    time.sleep(1000)
"""


def pid_alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rfind(")") + 2] != "Z"


def wait_gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def stop_popen(proc: subprocess.Popen[str]) -> None:
    """Kill and reap our own child. `Popen.kill` does nothing once it has been reaped, so
    a pid the kernel has since given to another process is never signalled."""
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def scrape(addr: str) -> str:
    """One /metrics scrape of a watch listening on `addr` (host:port)."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=30) as resp:
        return str(resp.read().decode())


def metric(text: str, name: str) -> float | None:
    """The value of the sample `name` (with its labels, if any) in a scrape's text."""
    return next(
        (float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")),
        None,
    )


@contextlib.contextmanager
def watch_cli(*args: str, nofile: int | None = None) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`accelhost watch --metrics-addr 127.0.0.1:0 ARGS` (under `ulimit -n NOFILE`), and
    the address it says it listens on; killed and reaped at the end, whatever happened."""
    limit = f"ulimit -n {nofile}; " if nofile else ""
    proc = subprocess.Popen(
        ["bash", "-c", f'{limit}exec "$0" -m accelhost.cli.main watch "$@"', PY]
        + ["--metrics-addr", "127.0.0.1:0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = json.loads(proc.stdout.readline())
        assert first["event"] == "listening"
        yield proc, str(first["addr"])
    finally:
        stop_popen(proc)  # never a bare kill(pid): it may have been reaped and reused


def remove_shmid(shmid: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    libc.shmctl(shmid, 0, None)


def shmids_now() -> set[int]:
    lines = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return {int(line.split()[1]) for line in lines if line.strip()}


@dataclass
class Lab:
    """What one test created, torn down by id."""

    tmp: Path
    pids: list[int] = field(default_factory=list)
    # pid -> pidfd, opened as soon as a grandchild's pid is known (it is alive then): the
    # teardown signals through it, so a pid reused after `clean` killed it is never hit.
    pidfds: dict[int, int] = field(default_factory=dict)
    popens: list[subprocess.Popen[str]] = field(default_factory=list)
    shmids: list[int] = field(default_factory=list)

    def adopt(self, pid: int) -> int:
        """Track a process we did not fork directly (it outlives its launcher)."""
        self.pids.append(pid)
        with contextlib.suppress(ProcessLookupError):
            self.pidfds[pid] = os.pidfd_open(pid)
        return pid

    def device_node(self, name: str = "davinci_test0") -> Path:
        """A character device with /dev/null's numbers: opening it is harmless."""
        path = self.tmp / "dev" / name
        path.parent.mkdir(exist_ok=True)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return path

    def glob(self) -> str:
        return str(self.tmp / "dev" / "*")

    def _wait_title(self, pid: int, title: str) -> None:
        """Titles are set by exec: wait until the process has exec'd."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(title.encode()):
                    return
            time.sleep(0.02)
        raise AssertionError(f"pid {pid} never became {title!r}")

    def orphan_engine(self, node: Path, title: str = "VLLM::EngineCore") -> int:
        """An engine child whose setsid launcher exited: it hangs under PID 1 (or the
        nearest subreaper), with no frontend above it."""
        script = (
            f"exec 3<'{node}'; (exec -a '{title}' sleep 1000 >/dev/null 2>&1 </dev/null) & "
            "echo $!; exit 0"
        )
        engine = self.setsid_script(script)
        self._wait_title(engine, title)
        return engine

    def setsid_script(
        self, script: str, env: dict[str, str] | None = None, wait: bool = True
    ) -> int:
        """The pid a `setsid bash -c SCRIPT` prints first (`(...) & echo $!`), adopted for
        teardown; with `wait`, once the launcher has exited (the process is an orphan)."""
        launcher = subprocess.Popen(
            ["setsid", "bash", "-c", script], stdout=subprocess.PIPE, text=True, env=env
        )
        self.popens.append(launcher)
        assert launcher.stdout is not None
        pid = self.adopt(int(launcher.stdout.readline()))
        if wait:
            launcher.wait(timeout=20)
        return pid

    def server(
        self,
        node: Path,
        frontend: str = "vllm serve tiny-model",
        child: str = "VLLM::EngineCore",
        worker: str = "VLLM::Worker_TP0",
        launcher_exits: bool = True,
    ) -> tuple[int, int, int]:
        """(frontend, engine child, worker) pids of a stand-in server tree, titled with
        `exec -a` like the real one retitles itself: FRONTEND -> CHILD -> WORKER, the
        child and worker holding `node` open.

        With `launcher_exits`, it is started the way deployment scripts do it
        (`setsid sh -c 'nohup vllm serve ... &'`, then the script exits): the frontend
        stays in the script's process group, whose leader is gone. Otherwise the launcher
        shell waits for it (the frontend's parent is that shell)."""
        pids = self.tmp / f"server-{len(self.pids)}.pids"
        inner = (
            f"exec 3<'{node}'; (exec -a '{worker}' sleep 1000 >/dev/null 2>&1 </dev/null) & "
            f"echo $! > '{pids}.worker'; wait"
        )
        fifo = self.tmp / f"server-{len(self.pids)}.fifo"
        os.mkfifo(fifo)
        # the frontend blocks on a FIFO it holds open itself (no child, no busy loop): it
        # outlives its engine child, as an API server does for a moment
        front = (
            f"(exec -a '{child}' bash -c \"$INNER\" >/dev/null 2>&1 </dev/null) & "
            f"echo $! > '{pids}.engine'; exec 4<>'{fifo}'; read -r _ <&4"
        )
        tail = "exit 0" if launcher_exits else "wait"
        script = (
            f"(exec -a '{frontend}' bash -c \"$FRONT\" >/dev/null 2>&1 </dev/null) & "
            f"echo $!; {tail}"
        )
        env = {**os.environ, "INNER": inner, "FRONT": front}
        fe = self.setsid_script(script, env, wait=launcher_exits)
        # one file per writer: two processes appending to one file race for the order
        written = [Path(f"{pids}.engine"), Path(f"{pids}.worker")]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(p.exists() and p.read_text().endswith("\n") for p in written):
                break
            time.sleep(0.02)
        engine, wk = (self.adopt(int(p.read_text())) for p in written)
        self._wait_title(fe, frontend)
        self._wait_title(engine, child)
        self._wait_title(wk, worker)
        return fe, engine, wk

    def healthy_engine(self, node: Path, title: str = "VLLM::EngineCore") -> tuple[int, int]:
        """(engine child pid, frontend pid) of a healthy server whose launcher exited."""
        fe, engine, _ = self.server(node, child=title)
        return engine, fe

    def orphan_engine_with_segment(self, node: Path) -> tuple[int, int]:
        """(pid, shmid): an orphan engine (`python3 -c ... VLLM::EngineCore`) that created
        a segment and keeps it attached, as a crashed engine would."""
        out = self.tmp / f"shmid-{len(self.pids)}"
        script = (
            f'exec 3<\'{node}\'; (exec -a VLLM::EngineCore "$PY" -c "$HELPER" create-attach 8192 '
            f">'{out}' 2>/dev/null </dev/null) & echo $!; exit 0"
        )
        pid = self.setsid_script(script, {**os.environ, "PY": PY, "HELPER": SHM_HELPER})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = out.read_text() if out.exists() else ""
            if text.endswith("\n"):
                shmid = int(text)
                self.shmids.append(shmid)
                return pid, shmid
            time.sleep(0.05)
        raise AssertionError("the engine did not create its segment")

    def segment(self, mode: str, arg: int) -> tuple[int, int | None]:
        """(shmid, pid of a helper still running or None). Modes: create-exit,
        create-sleep, create-attach, attach (arg = shmid)."""
        proc = subprocess.Popen(
            [PY, "-c", SHM_HELPER, mode, str(arg)], stdout=subprocess.PIPE, text=True
        )
        self.popens.append(proc)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip(), f"shm helper failed ({mode})"
        shmid = int(line)
        if mode != "attach":
            self.shmids.append(shmid)
        if mode == "create-exit":
            proc.wait(timeout=20)
            return shmid, None
        return shmid, proc.pid

    def teardown(self) -> None:
        for pid in self.pids:
            fd = self.pidfds.pop(pid, None)
            if fd is None:
                continue  # gone before we could pin it: nothing of ours to kill
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            os.close(fd)
        for p in self.popens:
            stop_popen(p)
        for shmid in self.shmids:
            remove_shmid(shmid)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    if os.geteuid() != 0 or not Path("/proc/sysvipc/shm").exists():
        pytest.skip("needs root on Linux")
    lab = Lab(tmp_path)
    try:
        yield lab
    finally:
        lab.teardown()


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


def _runs_as_nobody(python: str, cwd: Path) -> bool:
    try:
        res = subprocess.run(
            [*NOBODY, python, "-c", "import sys; assert sys.version_info >= (3, 10)"],
            capture_output=True,
            timeout=60,
            check=False,
            cwd=cwd,
        )
    except OSError:
        return False
    return res.returncode == 0


def nobody_python(tmp: Path) -> tuple[list[str], dict[str, str]]:
    """(argv prefix, env) to run this checkout's accelhost as `nobody`, wherever it lives.

    The checkout (and its .venv) may sit under a directory only root can enter (/root, a
    `mktemp -d`): the package is copied to `tmp` (made world-readable) and run by the
    first interpreter nobody can execute. The core needs only the standard library.
    """
    import accelhost

    tmp.chmod(0o755)
    site = tmp / "site"
    shutil.copytree(
        Path(accelhost.__file__).parent,
        site / "accelhost",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    for root, dirs, files in os.walk(tmp):
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
        for name in files:
            os.chmod(os.path.join(root, name), 0o644)
    candidates = [sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3"]
    candidates += [p for p in (shutil.which("python3"),) if p]
    python = next((c for c in dict.fromkeys(candidates) if _runs_as_nobody(c, tmp)), None)
    if python is None:
        pytest.skip("no Python 3.10+ interpreter that the user nobody may run")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}
    return [*NOBODY, python, "-s"], env


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "accelhost.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def shm_dir() -> Iterator[Path]:
    """A private directory on /dev/shm's tmpfs, removed with what is in it."""
    if os.geteuid() != 0 or not Path("/dev/shm").is_dir():
        pytest.skip("needs root and /dev/shm")
    path = Path(tempfile.mkdtemp(prefix="accelhost-test-shm-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
