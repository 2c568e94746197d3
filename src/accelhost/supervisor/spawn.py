"""Start the command in its own session and process group, optionally inside a cgroup.

A plain fork and exec instead of `subprocess`: the supervisor reaps with waitpid(-1), which
would race a Popen object's own bookkeeping, and the child must join the cgroup before it
execs (so that nothing it forks can be outside). Exec errors come back through a
close-on-exec pipe, as in `subprocess`, so "command not found" is a message and 127.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from accelhost.supervisor.cgroup import Cgroup, join_cgroup


@dataclass
class SpawnError(Exception):
    """The command could not be started: which step failed and the errno it failed with."""

    step: str  # "exec" or "cgroup"
    errno: int
    argv0: str

    def __str__(self) -> str:
        if self.step == "cgroup":
            return f"--cgroup: cannot join the cgroup: {os.strerror(self.errno)}"
        if self.errno == errno.ENOENT:
            return f"{self.argv0}: command not found"
        return f"{self.argv0}: cannot execute: {os.strerror(self.errno)}"


def _child(argv: Sequence[str], cgroup: Cgroup | None, reset: Sequence[int], err_w: int) -> None:
    """Runs in the forked child; never returns."""
    step = "setup"
    try:
        signal.set_wakeup_fd(-1)
        for sig in reset:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.setsid()
        if cgroup is not None:
            step = "cgroup"
            join_cgroup(cgroup, os.getpid())
        step = "exec"
        os.execvp(argv[0], list(argv))
    except OSError as exc:
        code = exc.errno or errno.EINVAL
    except BaseException:
        code = errno.EINVAL
    try:
        os.write(err_w, f"{step}:{code}".encode())
    finally:
        os._exit(127)


def spawn(argv: Sequence[str], cgroup: Cgroup | None, reset: Sequence[int]) -> int:
    """The command's pid (also its process group and session id). SpawnError when it did
    not start; the failed child has been reaped by then."""
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except BaseException:
        os.close(err_r)
        os.close(err_w)
        raise
    if pid == 0:  # pragma: no cover - the child execs or exits
        os.close(err_r)
        _child(argv, cgroup, reset, err_w)
    os.close(err_w)
    try:
        chunks = []
        while True:
            data = os.read(err_r, 64)
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(err_r)
    if not chunks:
        return pid
    os.waitpid(pid, 0)
    step, _, code = b"".join(chunks).decode().partition(":")
    raise SpawnError(step, int(code or errno.EINVAL), argv[0])
