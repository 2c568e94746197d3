"""sysfs and cgroup files beyond plain CPU lists: PCI addresses, NUMA nodes, caches,
cpusets, HugePages pools.

The kernel writes these files in a fixed, simple format, but snapshots are hand-edited and
containers mount odd things; every parser here names the file it could not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from accelhost.cpulist import MAX_NODES, parse_id
from accelhost.errors import ParseError

PCI_DEVICES = "/sys/bus/pci/devices"
NODE_ROOT = "/sys/devices/system/node"
CPU_ROOT = "/sys/devices/system/cpu"
CGROUP_ROOT = "/sys/fs/cgroup"

# domain (4 or 8 hex digits, optional), bus, device, function: `00000000:1B:00.0`, `3b:00.0`
_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})\.(?P<fn>[0-7])$"
)
_NODE_DIR_RE = re.compile(r"^node([0-9]+)$")
_CACHE_DIR_RE = re.compile(r"^index([0-9]+)$")
_HUGEPAGES_DIR_RE = re.compile(r"^hugepages-([0-9]{1,15})kB$")


def normalize_pci_address(text: str, source: str = "PCI address") -> str:
    """The sysfs form `0000:1b:00.0` of any usual spelling.

    nvidia-smi writes an 8-digit upper-case domain (`00000000:1B:00.0`), lspci leaves the
    domain out (`1b:00.0`); sysfs directory names are 4-digit lower-case. Domains wider
    than 16 bits (VMD) keep their extra digits, as sysfs does.
    """
    match = _PCI_RE.match(text.strip())
    if match is None:
        raise ParseError(source, f"not a PCI address: {text.strip()!r}")
    domain = int(match["domain"] or "0", 16)
    bus = int(match["bus"], 16)
    dev = int(match["dev"], 16)
    if dev > 0x1F:
        raise ParseError(source, f"PCI device number out of range in {text.strip()!r}")
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{match['fn']}"


def parse_int_file(text: str, source: str) -> int:
    """A sysfs file holding one integer (`numa_node`, `physical_package_id`, `level`, a
    HugePages counter)."""
    stripped = text.strip()
    try:
        return int(stripped)
    except ValueError:
        raise ParseError(source, f"expected one integer, found {stripped[:40]!r}") from None


def parse_numa_node(text: str, source: str) -> int | None:
    """A PCI device's `numa_node`; None for `-1`, which the kernel writes when it does not
    know (one-node hosts, many VMs), so callers cannot mistake "unknown" for a node."""
    value = parse_int_file(text, source)
    if value < -1 or value >= MAX_NODES:
        raise ParseError(source, f"not a NUMA node: {value}")
    return None if value == -1 else value


def node_ids_from_dir(names: Iterable[str], source: str = NODE_ROOT) -> list[int]:
    """Node ids from a listing of /sys/devices/system/node (`node0`, `node1`, ...), sorted."""
    return sorted(
        parse_id(m[1], source, MAX_NODES, "NUMA node")
        for name in names
        if (m := _NODE_DIR_RE.match(name))
    )


# No CPU has more than a handful of cache levels and kinds (index0-3 on most).
MAX_CACHE_INDICES = 64


def cache_indices_from_dir(names: Iterable[str], source: str = "cpu cache directory") -> list[int]:
    """`indexK` entries of /sys/devices/system/cpu/cpuN/cache, sorted by K."""
    return sorted(
        parse_id(m[1], source, MAX_CACHE_INDICES, "cache index")
        for name in names
        if (m := _CACHE_DIR_RE.match(name))
    )


def cgroup_cpuset_candidates(proc_cgroup: str) -> list[str]:
    """Paths where a process's effective cpuset may be, most specific first.

    From `/proc/PID/cgroup`: the unified hierarchy (`0::/path`) gives
    `cpuset.cpus.effective`, a v1 `cpuset` controller gives `cpuset.effective_cpus`; then
    the parents of that path. Without a cgroup namespace the listed path is the host's and
    does not exist inside the container, so the mount roots come after them.
    """
    v2: list[str] = []
    v1: list[str] = []
    for line in proc_cgroup.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        _hid, controllers, path = parts
        levels = [p for p in path.split("/") if p]
        ancestors = ["/" + "/".join(levels[:n]) if n else "" for n in range(len(levels), -1, -1)]
        if controllers == "":
            v2.append(f"{CGROUP_ROOT}{ancestors[0]}/cpuset.cpus.effective")
            v2.append(f"{CGROUP_ROOT}/unified{ancestors[0]}/cpuset.cpus.effective")
            v2.extend(f"{CGROUP_ROOT}{anc}/cpuset.cpus.effective" for anc in ancestors[1:])
        elif "cpuset" in controllers.split(","):
            v1.extend(f"{CGROUP_ROOT}/cpuset{anc}/cpuset.effective_cpus" for anc in ancestors)
    roots = [f"{CGROUP_ROOT}/cpuset.cpus.effective", f"{CGROUP_ROOT}/cpuset/cpuset.effective_cpus"]
    return list(dict.fromkeys(v2 + v1 + roots))


@dataclass(frozen=True)
class HugePagePool:
    """One pool of `/sys/kernel/mm/hugepages/hugepages-<size>kB/` (`nr_hugepages`,
    `free_hugepages`, `resv_hugepages`, `surplus_hugepages`) or of
    `/sys/devices/system/node/node<N>/hugepages/` (the same without `resv_hugepages`).
    `node` is None for the host-wide pool.

    `used` counts pages handed out plus pages promised to a mapping (reserved ones are
    still "free" in the kernel's count but cannot be given to anyone else).
    """

    size_kb: int
    node: int | None
    total: int
    free: int
    reserved: int = 0
    surplus: int = 0

    @property
    def used(self) -> int:
        return max(0, self.total - self.free + self.reserved)

    @property
    def used_fraction(self) -> float | None:
        return None if self.total <= 0 else min(1.0, self.used / self.total)

    @property
    def size_label(self) -> str:
        """`2048kB`, `1048576kB`: the kernel's own spelling, used as a metric label."""
        return f"{self.size_kb}kB"


def parse_size_dir(name: str) -> int | None:
    """`hugepages-2048kB` -> 2048; None for any other entry name."""
    m = _HUGEPAGES_DIR_RE.match(name)
    return int(m.group(1)) if m else None
