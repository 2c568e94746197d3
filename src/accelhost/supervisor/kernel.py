"""The few Linux calls that set up the supervisor and its child, each failing softly (a
supervisor that cannot become a subreaper still works; it must not refuse the engine).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

from accelhost.host.libc import check, libc

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
        prctl.restype = ctypes.c_int
        return bool(prctl(PR_SET_CHILD_SUBREAPER, 1, 0) == 0)
    except (OSError, AttributeError):
        return False


def open_pidfd(pid: int) -> int | None:
    """A descriptor that names this very process (no pid-reuse race) and becomes readable
    when it exits; None when the process is gone or the kernel has no pidfds (< 5.3)."""
    if not hasattr(os, "pidfd_open"):
        return None
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def private_ipc_setup() -> Callable[[], None]:
    """A function for the forked child (looked up before the fork): a new IPC namespace
    and a fresh tmpfs on /dev/shm, as Docker's `--ipc=private`, freed by the kernel with
    their last process. Raises OSError (EPERM without CAP_SYS_ADMIN)."""
    unshare = libc().unshare
    unshare.argtypes = [ctypes.c_int]
    unshare.restype = ctypes.c_int
    mount = libc().mount
    mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
    mount.restype = ctypes.c_int

    def setup() -> None:
        check(unshare(CLONE_NEWIPC | CLONE_NEWNS), "unshare")
        # Mounts made from here on must not propagate back to the host's namespace.
        check(mount(None, b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
        tmpfs = mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777")
        check(tmpfs, "mount tmpfs /dev/shm")

    return setup
