"""Start the command in its own session and process group, optionally inside a cgroup.

A plain fork and exec, not `subprocess`: waitpid(-1) would race a Popen's bookkeeping, and
the child must join the cgroup before it execs. Exec errors come back through a
close-on-exec pipe, so "command not found" is a message and 127.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from accelhost.supervisor.cgroup import Cgroup, join_cgroup
from accelhost.supervisor.kernel import private_ipc_setup


@dataclass
class SpawnError(Exception):
    step: str  # "exec", "cgroup" or "private-ipc"
    errno: int
    argv0: str

    def __str__(self) -> str:
        if self.step == "cgroup":
            return f"--cgroup: cannot join the cgroup: {os.strerror(self.errno)}"
        if self.step == "private-ipc":
            return (
                "--private-ipc: cannot make an IPC namespace and /dev/shm of the command's "
                f"own: {os.strerror(self.errno)}"
            )
        if self.errno == errno.ENOENT:
            return f"{self.argv0}: command not found"
        return f"{self.argv0}: cannot execute: {os.strerror(self.errno)}"


def _child(
    argv: Sequence[str],
    cgroup: Cgroup | None,
    reset: Sequence[int],
    err_w: int,
    private: Callable[[], None] | None,
) -> None:
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
        if private is not None:
            step = "private-ipc"
            private()
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


def spawn(
    argv: Sequence[str], cgroup: Cgroup | None, reset: Sequence[int], private_ipc: bool = False
) -> int:
    """The command's pid (also its process group and session id). SpawnError when it did
    not start; the failed child has been reaped by then."""
    private = private_ipc_setup() if private_ipc else None
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except BaseException:
        os.close(err_r)
        os.close(err_w)
        raise
    if pid == 0:  # pragma: no cover - the child execs or exits
        os.close(err_r)
        _child(argv, cgroup, reset, err_w, private)
    os.close(err_w)
    with open(err_r, "rb") as pipe:  # empty once the exec closed it
        failure = pipe.read()
    if not failure:
        return pid
    os.waitpid(pid, 0)
    step, _, code = failure.decode().partition(":")
    raise SpawnError(step, int(code or errno.EINVAL), argv[0])
