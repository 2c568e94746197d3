"""Device memory as the vendor tools report it (npu-smi, nvidia-smi), read through the host.

A tool that is not installed gives None (no such devices); a tool that fails or prints
what we cannot parse records why in `errors` and gives an empty list (the checks that
need it become UNKNOWN). Who has a device node open is read from /proc/PID/fd
(`device_paths_held`, `scan_device_holders`); a process whose fds cannot be read is in
the holder scan's `unreadable` (`accelhost.readers.shmfiles.scan_held`), never "holds none".
"""

from __future__ import annotations

from dataclasses import dataclass

from accelhost.errors import AccelhostError
from accelhost.host.base import Host
from accelhost.hygiene.options import HygieneOptions
from accelhost.parsers.devnodes import VENDOR_KIND, device_node
from accelhost.parsers.nvidia_smi import (
    APPS_QUERY,
    GPU_QUERY,
    QUERY_GPU_ARGV,
    parse_compute_apps,
    parse_gpu_memory,
    parse_query_gpu,
)
from accelhost.readers.procs import list_pids, open_fds
from accelhost.readers.topology import NPU_INFO


@dataclass(frozen=True)
class DeviceProcessMemory:
    pid: int
    name: str
    memory_mib: int | None


@dataclass(frozen=True)
class DeviceMemory:
    """One accelerator as its vendor tool reports it. Memory in MiB (npu-smi's "MB")."""

    vendor: str
    index: int
    used_mib: int | None
    total_mib: int | None
    bus_id: str | None = None
    name: str = ""
    processes: tuple[DeviceProcessMemory, ...] = ()

    @property
    def label(self) -> str:
        return f"{'npu' if self.vendor == 'ascend' else 'gpu'}{self.index}"

    @property
    def node(self) -> str:
        """The device node its users open (`/dev/davinciN`, `/dev/nvidiaN`)."""
        return device_node(VENDOR_KIND[self.vendor], self.index)

    @property
    def free_mib(self) -> int | None:
        if self.used_mib is None or self.total_mib is None:
            return None
        return max(0, self.total_mib - self.used_mib)


def read_ascend(host: Host, errors: dict[str, str]) -> list[DeviceMemory] | None:
    from accelhost.parsers.npusmi import parse_npu_smi_info

    result = host.run(NPU_INFO)
    if result is None:
        return None
    if not result.ok:
        errors["devices"] = f"`npu-smi info` failed with status {result.rc}"
        return []
    try:
        info = parse_npu_smi_info(result.stdout)
    except AccelhostError as exc:
        errors["devices"] = str(exc)
        return []
    if not info.chips:
        errors["devices"] = "`npu-smi info` printed no chip table"
        return []
    order = sorted(info.chips, key=lambda c: (c.npu_id, c.chip_id))
    # an A3 chip names its /dev/davinciN (Phy-ID), which a container keeps from its host;
    # elsewhere the position is the number (a host lists every chip in that order)
    phys = [c.phy_id for c in order]
    numbers = phys if None not in phys and len(set(phys)) == len(phys) else range(len(order))
    index_of = {(c.npu_id, c.chip_id): int(n or 0) for c, n in zip(order, numbers, strict=True)}
    first_chip = {c.npu_id: c.chip_id for c in reversed(order)}  # each NPU's lowest chip
    procs: dict[int, list[DeviceProcessMemory]] = {}
    for p in info.processes:
        chip = p.chip_id if p.chip_id is not None else first_chip.get(p.npu_id)
        idx = index_of.get((p.npu_id, chip if chip is not None else -1))
        if idx is not None and p.pid >= 0:
            procs.setdefault(idx, []).append(DeviceProcessMemory(p.pid, p.name, p.memory_mb))
    return [
        DeviceMemory(
            vendor="ascend",
            index=i,
            used_mib=c.hbm_used_mb if c.hbm_total_mb else None,
            total_mib=c.hbm_total_mb or None,
            bus_id=c.bus_id,
            name=c.name,
            processes=tuple(procs.get(i, ())),
        )
        for c in order
        for i in (index_of[(c.npu_id, c.chip_id)],)
    ]


def read_nvidia(host: Host, errors: dict[str, str]) -> list[DeviceMemory] | None:
    # GPU index -> PCI address from the query the planner reads too (`read_gpu_topology`):
    # one fact, one command, run once when a snapshot records both
    gpu, apps, bus = host.run_many([GPU_QUERY, APPS_QUERY, QUERY_GPU_ARGV])
    if gpu is None:
        return None
    if not gpu.ok:
        errors["devices"] = f"`{' '.join(GPU_QUERY)}` failed with status {gpu.rc}"
        return []
    try:
        memory = parse_gpu_memory(gpu.stdout)
        rows = parse_query_gpu(bus.stdout) if bus is not None and bus.ok else []
        bus_ids = {row.pci: row.index for row in rows}
        app_rows = parse_compute_apps(apps.stdout) if apps is not None and apps.ok else []
    except AccelhostError as exc:
        errors["devices"] = str(exc)
        return []
    if apps is None or not apps.ok:
        errors["device_processes"] = "nvidia-smi compute-apps query failed"
    elif app_rows and not bus_ids:
        # compute apps name their GPU by bus id only: without the map none can be placed
        errors["device_processes"] = "nvidia-smi bus-id query failed: processes not placed"
    index_bus = {i: b for b, i in bus_ids.items()}
    procs: dict[int, list[DeviceProcessMemory]] = {}
    for app in app_rows:
        idx = bus_ids.get(app.bus_id)  # both in the sysfs form, 0000:3b:00.0
        if idx is not None:
            procs.setdefault(idx, []).append(DeviceProcessMemory(app.pid, "", app.used_mib))
    return [
        DeviceMemory(
            vendor="nvidia",
            index=g.index,
            used_mib=g.used_mib,
            total_mib=g.total_mib,
            bus_id=index_bus.get(g.index),
            processes=tuple(procs.get(g.index, ())),
        )
        for g in memory
    ]


def device_paths_held(host: Host, pid: int, options: HygieneOptions) -> tuple[str, ...]:
    """The device nodes (by the option's globs) among a process's open files."""
    paths = {t.removesuffix(" (deleted)") for t in (open_fds(host, pid) or {}).values()}
    return tuple(sorted(p for p in paths if p.startswith("/") and options.is_device_path(p)))


def scan_device_holders(host: Host, options: HygieneOptions) -> dict[int, tuple[str, ...]]:
    """pid -> device nodes it has open, for every process (what `fuser -v NODES` answers)."""
    return {pid: held for pid in list_pids(host) if (held := device_paths_held(host, pid, options))}
