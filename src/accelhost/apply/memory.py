"""NUMA memory: move_pages(2) and set_mempolicy(2) via ctypes (no numactl),
and the parsers of /proc/PID/smaps and /proc/PID/numa_maps that say what may move.

Files are read through the host door, under `--host-root` when given.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
from dataclasses import dataclass

from accelhost.cpulist import MAX_NODES, parse_cpulist
from accelhost.errors import ParseError
from accelhost.host.live import live_host
from accelhost.kernel.libc import syscall

# MPOL_DEFAULT, MPOL_PREFERRED and MPOL_BIND of <linux/mempolicy.h>, by name.
MODES = {"default": 0, "preferred": 1, "bind": 2}

MPOL_MF_MOVE = 1 << 1  # only pages mapped by this process alone (no CAP_SYS_NICE needed)


def _mask(nodes: list[int]) -> tuple[ctypes.Array[ctypes.c_ulong], int]:
    """A node bitmask and the `maxnode` to pass with it (one past the bits: kernel quirk)."""
    words = (max(nodes, default=0) // 64) + 1
    arr = (ctypes.c_ulong * words)()
    for n in nodes:
        arr[n // 64] |= 1 << (n % 64)
    return arr, words * 64 + 1


def move_pages(pid: int, addresses: list[int], node: int) -> list[int]:
    """Move the pages at `addresses` of `pid` to `node`; each page's status as the kernel
    gives it: the node it is on now, or a negative errno (-ENOENT: not present, -EBUSY:
    pinned, -EACCES: mapped by other processes too, -EFAULT: no such mapping)."""
    count = len(addresses)
    pages = (ctypes.c_void_p * count)(*addresses)
    nodes = (ctypes.c_int * count)(*([node] * count))
    status = (ctypes.c_int * count)()
    flags = ctypes.c_int(MPOL_MF_MOVE)
    syscall("move_pages", ctypes.c_int(pid), ctypes.c_ulong(count), pages, nodes, status, flags)
    return list(status)


def set_mempolicy(mode: str, nodes: list[int]) -> None:
    """The calling thread's policy; inherited by children and kept across execve."""
    mask, maxnode = _mask(nodes)
    syscall("set_mempolicy", ctypes.c_int(MODES[mode]), mask, ctypes.c_ulong(maxnode))


def memory_nodes(root: str = "/") -> list[int]:
    """NUMA nodes that hold memory (empty when the kernel shows no NUMA information)."""
    host = live_host()
    base = os.path.join(root, "sys/devices/system/node")
    for name in ("has_memory", "online"):
        text = host.read_file(os.path.join(base, name))
        if text is not None and text.strip():
            try:
                return sorted(set(parse_cpulist(text, f"{base}/{name}", limit=MAX_NODES)))
            except ParseError:
                break
    names = host.list_dir(base) or []
    return sorted(int(n[4:]) for n in names if re.fullmatch(r"node\d+", n))


def node_free_kb(node: int, root: str = "/") -> int | None:
    """MemFree of one node (its sysfs meminfo); None when unknown."""
    text = live_host().read_file(os.path.join(root, f"sys/devices/system/node/node{node}/meminfo"))
    m = re.search(rf"^Node {node} MemFree:\s+(\d+) kB", text or "", re.M)
    return int(m.group(1)) if m else None


def node_of_cpu(cpu: int, root: str = "/") -> int | None:
    """The node whose cpulist holds `cpu`, from sysfs; None when unknown."""
    host = live_host()
    base = os.path.join(root, "sys/devices/system/node")
    names = host.list_dir(base) or ()
    for node in sorted(int(n[4:]) for n in names if re.fullmatch(r"node\d+", n)):
        path = os.path.join(base, f"node{node}", "cpulist")
        text = host.read_file(path)
        with contextlib.suppress(ParseError):
            if text is not None and cpu in parse_cpulist(text, path):
                return node
    return None


_NODE_FIELD = re.compile(r"\bN(\d+)=(\d+)")


@dataclass(frozen=True)
class VmArea:
    """One mapping of /proc/PID/smaps: its range, permissions, path and what pins it."""

    start: int
    end: int
    perms: str
    path: str
    flags: frozenset[str] = frozenset()
    rss_kb: int = 0
    locked_kb: int = 0


_SMAPS_HEAD = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+ ?\s*(.*)$")


def parse_smaps(text: str) -> list[VmArea]:
    """Every mapping with its VmFlags (lo: locked, io/pf: I/O or PFN map, sh: shared)."""
    out: list[VmArea] = []
    head: tuple[int, int, str, str] | None = None
    flags: frozenset[str] = frozenset()
    rss = locked = 0

    def close() -> None:
        if head is not None:
            out.append(VmArea(*head, flags=flags, rss_kb=rss, locked_kb=locked))

    for line in text.splitlines():
        m = _SMAPS_HEAD.match(line)
        if m:
            close()
            head = (int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4).strip())
            flags, rss, locked = frozenset(), 0, 0
        elif line.startswith("VmFlags:"):
            flags = frozenset(line.split()[1:])
        elif line.startswith("Rss:"):
            rss = _kb(line)
        elif line.startswith("Locked:"):
            locked = _kb(line)
    close()
    return out


def _kb(line: str) -> int:
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


@dataclass(frozen=True)
class NumaRegion:
    """One /proc/PID/numa_maps line: resident pages per node and the page size."""

    pages: dict[int, int]
    page_kb: int
    policy: str


def parse_numa_regions(text: str) -> dict[int, NumaRegion]:
    """Start address -> the region's resident pages per node (hugetlb pages counted once)."""
    out: dict[int, NumaRegion] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        try:
            start = int(parts[0], 16)
        except ValueError:
            continue
        pages = {int(n): int(c) for n, c in _NODE_FIELD.findall(line)}
        m = re.search(r"\bkernelpagesize_kB=(\d+)", line)
        out[start] = NumaRegion(pages, int(m.group(1)) if m else 4, parts[1])
    return out


def kb_per_node(regions: dict[int, NumaRegion]) -> dict[int, int]:
    """Resident kB per node, summed over every region (huge pages at their size)."""
    out: dict[int, int] = {}
    for r in regions.values():
        for node, count in r.pages.items():
            out[node] = out.get(node, 0) + count * r.page_kb
    return dict(sorted(out.items()))


def read_proc(pid: int, name: str, root: str = "/") -> str | None:
    """/proc/PID/NAME under `root` (a node agent sees the host's /proc at /host/proc)."""
    return live_host().read_file(os.path.join(root, f"proc/{pid}/{name}"))
