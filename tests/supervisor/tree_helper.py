"""Builds real process trees for the supervisor tests (run as a script, never imported).

    python tree_helper.py MODE DIR [options]

Every process it starts carries DIR on its command line (so a test can find and kill
exactly its own processes by pid) and, once running, writes DIR/pids/<pid>.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import signal
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def note(out: str) -> None:
    os.makedirs(os.path.join(out, "pids"), exist_ok=True)
    with open(os.path.join(out, "pids", str(os.getpid())), "w") as fh:
        fh.write(" ".join(sys.argv))


def sleeper(out: str, ignore_term: bool) -> None:
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    note(out)
    while True:
        time.sleep(3600)


def start_sleeper(out: str, ignore_term: bool, setsid: bool = False) -> subprocess.Popen[bytes]:
    args = [sys.executable, HERE, "sleep", out] + (["--ignore-term"] if ignore_term else [])
    return subprocess.Popen(args, start_new_session=setsid)


def double_fork_sleeper(out: str, ignore_term: bool) -> None:
    """A grandchild whose parent exits at once: re-parented to the nearest subreaper."""
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            args = [sys.executable, HERE, "sleep", out] + (["--ignore-term"] if ignore_term else [])
            os.execv(sys.executable, args)
        os._exit(0)
    os.waitpid(pid, 0)


def shmget(size: int = 4096) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
    shmid = int(libc.shmget(0, size, 0o1000 | 0o600))  # IPC_PRIVATE, IPC_CREAT | 0600
    if shmid < 0:
        raise OSError(ctypes.get_errno(), "shmget")
    return shmid


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    flags = set(sys.argv[3:])
    os.makedirs(out, exist_ok=True)
    if mode == "sleep":
        sleeper(out, "--ignore-term" in flags)
    elif mode == "tree":
        # A background child, a double-forked grandchild and a setsid escapee, then wait.
        ign = "--ignore-term" in flags
        start_sleeper(out, ign)
        double_fork_sleeper(out, ign)
        start_sleeper(out, ign, setsid=True)
        note(out)
        if "--exit-0" in flags:
            # exit only once the three others have written their pids (a loaded machine
            # can take longer than any fixed pause to start three interpreters)
            pids = os.path.join(out, "pids")
            deadline = time.monotonic() + 60
            while len(os.listdir(pids)) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            os._exit(0)
        while True:
            time.sleep(3600)
    elif mode == "zombies":
        # Orphans that die at once: zombies of the subreaper unless it reaps them.
        for _ in range(5):
            pid = os.fork()
            if pid == 0:
                if os.fork() == 0:
                    os._exit(0)
                os._exit(0)
            os.waitpid(pid, 0)
        note(out)
        while True:
            time.sleep(3600)
    elif mode == "shm":
        # Segments left behind: one by the command itself, one by a child still running.
        with open(os.path.join(out, "shmids"), "a") as fh:
            fh.write(f"{shmget()}\n")
        if "--with-child" in flags:
            pid = os.fork()
            if pid == 0:
                with open(os.path.join(out, "shmids"), "a") as fh:
                    fh.write(f"{shmget()}\n")
                os.execv(sys.executable, [sys.executable, HERE, "sleep", out, "--ignore-term"])
            while (
                len(
                    os.listdir(os.path.join(out, "pids"))
                    if os.path.isdir(os.path.join(out, "pids"))
                    else []
                )
                < 1
            ):
                time.sleep(0.05)
        os._exit(0)
    elif mode == "engine":
        # An "API server" that does not notice its engine child dying (as vLLM exits 0 late).
        child = subprocess.Popen(
            [sys.executable, HERE, "engine-core", out, "FAKE::EngineCore"],
        )
        note(out)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        del child
        while True:
            time.sleep(3600)
    elif mode == "engine-core":
        note(out)
        time.sleep(float(os.environ.get("ENGINE_LIFETIME", "1.5")))
        os._exit(0)
    elif mode == "signals":
        # Record forwarded signals; exit 5 on SIGINT.
        def record(sig: int, _frame: object) -> None:
            with open(os.path.join(out, "signals"), "a") as fh:
                fh.write(f"{signal.Signals(sig).name}\n")
            if sig == signal.SIGINT:
                os._exit(5)

        for s in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, record)
        note(out)
        while True:
            time.sleep(3600)
    elif mode == "pid1":
        # Inside a new PID namespace under `accelhost run`: make orphans that die (must be
        # reaped by PID 1), report zombies, leave a TERM-recording straggler, exit 3.
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                if os.fork() == 0:
                    os._exit(0)
                os._exit(0)
            os.waitpid(pid, 0)
        time.sleep(0.5)
        zombies = 0
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/stat") as fh:
                        stat = fh.read()
                except OSError:
                    continue
                if stat[stat.rfind(")") + 2] == "Z":
                    zombies += 1
        with open(os.path.join(out, "pid1"), "w") as fh:
            fh.write(f"supervisor_is_pid1={os.getppid() == 1} zombies={zombies}\n")
        pid = os.fork()
        if pid == 0:
            if os.fork() == 0:

                def got_term(_s: int, _f: object) -> None:
                    with open(os.path.join(out, "straggler-term"), "w") as fh:
                        fh.write("TERM\n")
                    os._exit(0)

                signal.signal(signal.SIGTERM, got_term)
                note(out)
                while True:
                    time.sleep(3600)
            os._exit(0)
        os.waitpid(pid, 0)
        while not os.path.isdir(os.path.join(out, "pids")):
            time.sleep(0.05)
        os._exit(3)
    elif mode == "mkseg":
        # A short-lived process that makes a segment and exits at once (nobody reaps it but
        # its own parent, so no scan of the tree ever sees it).
        with open(os.path.join(out, "shmids"), "a") as fh:
            fh.write(f"{shmget()}\n")
        with open(os.path.join(out, "segpids"), "a") as fh:
            fh.write(f"{os.getpid()}\n")
        os._exit(0)
    elif mode == "shmfile":
        # Engine-like POSIX shared memory: a mapped file (like vLLM's psm_*); then wait for
        # the teardown, ignoring SIGTERM (the SIGKILL that follows leaves the file).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        fd = os.open(sys.argv[3], os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, 1 << 20)
        view = mmap.mmap(fd, 1 << 20)
        view[:4096] = b"x" * 4096
        os.close(fd)
        note(out)
        with open(os.path.join(out, "ready"), "w") as fh:
            fh.write("ready")
        while True:
            time.sleep(3600)
    elif mode == "shmfile-die":
        # Creates and maps a file, holds it a while, then dies of SIGKILL (as the OOM killer
        # does): nothing of the tree is alive when the teardown begins.
        fd = os.open(sys.argv[3], os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, 1 << 16)
        view = mmap.mmap(fd, 1 << 16)
        view[:1] = b"x"
        note(out)
        time.sleep(float(sys.argv[4]))
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "sem-die":
        # A named semaphore as Python's multiprocessing makes one (glibc's sem_open: a
        # temporary file, mapped, linked to /dev/shm/sem.NAME, the temporary name unlinked),
        # held under the temporary name only; then SIGKILL: nothing unlinks the name.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.sem_open.restype = ctypes.c_void_p
        sem = libc.sem_open(sys.argv[3].encode(), os.O_CREAT | os.O_EXCL, 0o600, 1)
        assert sem not in (None, ctypes.c_void_p(-1).value), os.strerror(ctypes.get_errno())
        note(out)
        time.sleep(float(sys.argv[4]))
        os.kill(os.getpid(), signal.SIGKILL)
    elif mode == "private":
        # Under --private-ipc: report the namespace and leave a segment and a /dev/shm file.
        name = sys.argv[3]
        shmid = shmget()
        with open(f"/dev/shm/{name}", "w") as fh:
            fh.write("left")
        ns = os.stat("/proc/self/ns/ipc").st_ino
        with open(os.path.join(out, "private"), "w") as fh:
            fh.write(f"{os.getpid()} {shmid} {ns}\n")
        os._exit(0)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
