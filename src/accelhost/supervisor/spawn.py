"""Start the command in its own session and process group, optionally inside a cgroup or
private IPC and /dev/shm namespaces; make the supervisor its tree's subreaper.

A plain fork and exec, not `subprocess`: waitpid(-1) would race a Popen's bookkeeping, and
the child must join the cgroup before it execs. Exec errors come back through a
close-on-exec pipe, so "command not found" is a message and 127.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from accelhost.kernel.libc import check, libc
from accelhost.supervisor.cgroup import Cgroup, join_cgroup

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REC = 0x4000
MS_SLAVE = 1 << 19


def become_subreaper() -> bool:
    """Orphans of the command's tree re-parent to us instead of to PID 1, so we can reap
    them and find them again through /proc parent links. False when the kernel refused."""
    if os.getpid() == 1:
        return True  # init of a PID namespace already receives every orphan
    try:
        prctl = libc().prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong]
        return bool(prctl(PR_SET_CHILD_SUBREAPER, 1, 0) == 0)
    except (OSError, AttributeError):
        return False


def private_ipc_setup() -> Callable[[], None]:
    """A function for the forked child (looked up before the fork): a new IPC namespace
    and a fresh tmpfs on /dev/shm, as Docker's `--ipc=private`, freed by the kernel with
    their last process. Raises OSError (EPERM without CAP_SYS_ADMIN)."""
    unshare = libc().unshare
    unshare.argtypes = [ctypes.c_int]
    mount = libc().mount
    mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]

    def setup() -> None:
        check(unshare(CLONE_NEWIPC | CLONE_NEWNS), "unshare")
        # Mounts made from here on must not propagate back to the host's namespace.
        check(mount(None, b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
        tmpfs = mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777")
        check(tmpfs, "mount tmpfs /dev/shm")

    return setup


@dataclass
class SpawnError(Exception):
    step: str  # "exec", "cgroup" or "private-ipc"
    errno: int
    argv0: str

    def __str__(self) -> str:
        why = os.strerror(self.errno)
        if self.step == "cgroup":
            return f"--cgroup: cannot join the cgroup: {why}"
        if self.step == "private-ipc":
            return (
                "--private-ipc: cannot make an IPC namespace and /dev/shm of the command's "
                f"own: {why}"
            )
        if self.errno == errno.ENOENT:
            return f"{self.argv0}: command not found"
        return f"{self.argv0}: cannot execute: {why}"


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
