"""The one binding of the C library and of the system calls Python's `os` lacks.

Readers (statx birth times, inotify) and changers (NUMA policy and pages, IPC_RMID, the
supervisor's prctl/unshare/mount) share one loaded libc and one table of syscall numbers,
so an architecture is added in one place. Every call reports failure as `OSError` with the
kernel's errno; `SyscallUnavailable` says the call cannot be made here at all (an unknown
architecture, or ENOSYS from a kernel built without it), which callers treat as "not
supported" rather than as a failure.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform

# Syscall numbers by architecture. The generic table (asm-generic/unistd.h) serves arm64,
# riscv64 and loongarch64.
_GENERIC = {"set_mempolicy": 237, "get_mempolicy": 236, "move_pages": 239, "statx": 291}
_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {"set_mempolicy": 238, "get_mempolicy": 239, "move_pages": 279, "statx": 332},
    "aarch64": _GENERIC,
    "riscv64": _GENERIC,
    "loongarch64": _GENERIC,
    "ppc64le": {"set_mempolicy": 261, "get_mempolicy": 260, "move_pages": 301, "statx": 383},
    "s390x": {"set_mempolicy": 270, "get_mempolicy": 269, "move_pages": 310, "statx": 379},
}
_ALIASES = {"amd64": "x86_64", "arm64": "aarch64", "ppc64": "ppc64le"}


class SyscallUnavailable(OSError):
    """The call cannot be made on this machine (unknown architecture, ENOSYS)."""


@functools.cache
def libc() -> ctypes.CDLL:
    """The process's C library (already loaded, so this costs no file lookup)."""
    lib = ctypes.CDLL(None, use_errno=True)
    lib.syscall.restype = ctypes.c_long
    return lib


def syscall(name: str, *args: object) -> int:
    """syscall(2) by name; the kernel's result, OSError (or SyscallUnavailable) on failure."""
    arch = platform.machine().lower()
    number = _NUMBERS.get(_ALIASES.get(arch, arch), {}).get(name)
    if number is None:
        raise SyscallUnavailable(errno.ENOSYS, f"no number known for {name} on {arch}")
    ctypes.set_errno(0)
    result = int(libc().syscall(ctypes.c_long(number), *args))
    if result < 0:
        raise_errno()
    return result


def raise_errno(what: str | None = None) -> None:
    """Raise the OSError that the last libc call left in errno (its text prefixed with
    `what` when given; a syscall's callers name their own context)."""
    err = ctypes.get_errno()
    text = os.strerror(err) if what is None else f"{what}: {os.strerror(err)}"
    if err == errno.ENOSYS:
        raise SyscallUnavailable(err, text)
    raise OSError(err, text)


def check(result: int, what: str) -> int:
    """`result` of a libc call that returns -1 on failure, or the OSError it stands for."""
    if result < 0:
        raise_errno(what)
    return result


def open_pidfd(pid: int) -> int | None:
    """A descriptor that names this very process (no pid-reuse race) and becomes readable
    when it exits; None when the process is gone or the kernel has no pidfds (< 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None
