"""NUMA memory: migrate_pages(2), set_mempolicy(2), get_mempolicy(2) through ctypes.

No numactl needed; the `migratepages` tool is only a fallback where the system call is
unavailable (an architecture whose syscall number we do not know, or a kernel without it).
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
from dataclasses import dataclass

from accelhost.cpulist import parse_cpulist
from accelhost.errors import ParseError

MPOL_DEFAULT = 0
MPOL_PREFERRED = 1
MPOL_BIND = 2
MODES = {"preferred": MPOL_PREFERRED, "bind": MPOL_BIND}
MODE_NAMES = {MPOL_DEFAULT: "default", MPOL_PREFERRED: "preferred", MPOL_BIND: "bind"}

# (set_mempolicy, get_mempolicy, migrate_pages). The generic table serves arm64, riscv64
# and loongarch64.
_GENERIC = (237, 236, 238)
_SYSCALLS: dict[str, tuple[int, int, int]] = {
    "x86_64": (238, 239, 256),
    "amd64": (238, 239, 256),
    "aarch64": _GENERIC,
    "arm64": _GENERIC,
    "riscv64": _GENERIC,
    "loongarch64": _GENERIC,
    "ppc64": (261, 260, 258),
    "ppc64le": (261, 260, 258),
    "s390x": (270, 269, 287),
}


class SyscallUnavailable(OSError):
    """The NUMA system calls cannot be made here (unknown architecture, no NUMA kernel)."""


def _numbers() -> tuple[int, int, int]:
    nums = _SYSCALLS.get(platform.machine().lower())
    if nums is None:
        raise SyscallUnavailable(f"no NUMA syscall numbers known for {platform.machine()}")
    return nums


_libc: ctypes.CDLL | None = None


def _syscall(number: int, *args: object) -> int:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    ctypes.set_errno(0)
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        err = ctypes.get_errno()
        if err == 38:  # ENOSYS: a kernel built without NUMA
            raise SyscallUnavailable(err, os.strerror(err))
        raise OSError(err, os.strerror(err))
    return result


def _mask(
    nodes: list[int] | tuple[int, ...], highest: int = 0
) -> tuple[ctypes.Array[ctypes.c_ulong], int]:
    """A node bitmask and the `maxnode` to pass with it (one past the bits: kernel quirk)."""
    words = (max([*nodes, highest]) // 64) + 1
    arr = (ctypes.c_ulong * words)()
    for n in nodes:
        arr[n // 64] |= 1 << (n % 64)
    return arr, words * 64 + 1


def migrate_pages(pid: int, from_nodes: list[int], to_nodes: list[int]) -> int:
    """Move `pid`'s pages; returns the number of pages the kernel could not move."""
    _, _, nr = _numbers()
    highest = max([*from_nodes, *to_nodes, 0])
    old, maxnode = _mask(from_nodes, highest)
    new, _ = _mask(to_nodes, highest)
    return _syscall(nr, ctypes.c_int(pid), ctypes.c_ulong(maxnode), old, new)


def set_mempolicy(mode: str, nodes: list[int]) -> None:
    """The calling thread's policy; inherited by children and kept across execve."""
    nr, _, _ = _numbers()
    mask, maxnode = _mask(nodes)
    _syscall(nr, ctypes.c_int(MODES[mode]), mask, ctypes.c_ulong(maxnode))


def get_mempolicy() -> tuple[str, list[int]]:
    """(mode name, nodes) of the calling thread's policy."""
    _, nr, _ = _numbers()
    mode = ctypes.c_int(0)
    mask, maxnode = _mask([1023])
    _syscall(nr, ctypes.byref(mode), mask, ctypes.c_ulong(maxnode), None, ctypes.c_ulong(0))
    nodes = [w * 64 + b for w, v in enumerate(mask) for b in range(64) if v >> b & 1]
    return MODE_NAMES.get(mode.value, str(mode.value)), nodes


def memory_nodes(root: str = "/") -> list[int]:
    """NUMA nodes that hold memory (empty when the kernel shows no NUMA information)."""
    base = os.path.join(root, "sys/devices/system/node")
    for name in ("has_memory", "online"):
        text = _read(os.path.join(base, name))
        if text is not None and text.strip():
            try:
                return sorted(set(parse_cpulist(text, f"{base}/{name}")))
            except ParseError:
                break
    try:
        return sorted(int(n[4:]) for n in os.listdir(base) if re.fullmatch(r"node\d+", n))
    except OSError:
        return []


def node_of_cpu(cpu: int, root: str = "/") -> int | None:
    """The node whose cpulist holds `cpu`, from sysfs; None when unknown."""
    base = os.path.join(root, "sys/devices/system/node")
    try:
        names = [n for n in os.listdir(base) if re.fullmatch(r"node\d+", n)]
    except OSError:
        return None
    for name in sorted(names, key=lambda n: int(n[4:])):
        text = _read(os.path.join(base, name, "cpulist"))
        try:
            if text is not None and cpu in parse_cpulist(text):
                return int(name[4:])
        except ParseError:
            continue
    return None


@dataclass(frozen=True)
class NumaUsage:
    """Pages per node as /proc/<pid>/numa_maps counts them, and the policies it shows."""

    pages: dict[int, int]
    policies: tuple[str, ...]

    @property
    def total(self) -> int:
        return sum(self.pages.values())

    def summary(self) -> str:
        if not self.pages:
            return "no pages resident"
        return ", ".join(f"N{n}={p}" for n, p in sorted(self.pages.items()))


_NODE_FIELD = re.compile(r"\bN(\d+)=(\d+)")


def parse_numa_maps(text: str) -> NumaUsage:
    pages: dict[int, int] = {}
    policies: list[str] = []
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) >= 2 and parts[1] not in policies:
            policies.append(parts[1])
        for node, count in _NODE_FIELD.findall(line):
            pages[int(node)] = pages.get(int(node), 0) + int(count)
    return NumaUsage(pages, tuple(policies))


def numa_usage(pid: int, root: str = "/") -> NumaUsage | None:
    text = _read(os.path.join(root, f"proc/{pid}/numa_maps"))
    return None if text is None else parse_numa_maps(text)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None
