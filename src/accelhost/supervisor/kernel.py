"""The few Linux calls the standard library lacks, through ctypes, each failing softly.

A supervisor that cannot become a subreaper (old kernel, seccomp) still works for the
processes that stay under its command; it must not refuse to start the engine.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal

PR_SET_CHILD_SUBREAPER = 36


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def become_subreaper() -> bool:
    """Orphans of the command's tree re-parent to us instead of to PID 1, so we can reap
    them and find them again through /proc parent links. False when the kernel refused."""
    if os.getpid() == 1:
        return True  # init of a PID namespace already receives every orphan
    try:
        libc = _libc()
        libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong]
        libc.prctl.restype = ctypes.c_int
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0) == 0)
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


def send_signal(pid: int, sig: int, pidfd: int | None) -> bool:
    """Signal through the pidfd when there is one; False when the process is gone."""
    try:
        if pidfd is not None and hasattr(signal, "pidfd_send_signal"):
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    return True
