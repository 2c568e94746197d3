"""`read_topology`: the family decided once, and one `Topology` for every family; the
Ascend one read here too (npu-smi for the chips, lscpu for CPUs and nodes: the sources
vllm-ascend's CPU binding reads, so its plans can be reproduced exactly).

The host is wrapped in `accelhost.host.read_once`, so each command and file is read at
most once per call, however many readers below ask.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from operator import itemgetter
from typing import Any

from accelhost.errors import ParseError
from accelhost.family import family_from_chip_names, normalize_family
from accelhost.host.base import CommandResult, Host, recorded_pci
from accelhost.host.once import read_once
from accelhost.parsers.lscpu import parse_cpu_nodes, parse_threads_per_core
from accelhost.parsers.npusmi import parse_npu_map, parse_npu_smi_info, parse_npu_topo
from accelhost.parsers.procstat import MISSING_LINE
from accelhost.parsers.ps import parse_thread_ids
from accelhost.readers.cpus import (
    LSCPU,
    LSCPU_NODES,
    STATUS,
    read_allowed_cpus,
    read_cgroup_cpuset,
    stdout,
)
from accelhost.topology import Accelerator, Topology

NPU_MAP = ["npu-smi", "info", "-m"]
NPU_INFO = ["npu-smi", "info"]
NPU_TOPO = ["npu-smi", "info", "-t", "topo"]
PS_THREADS = ["ps", "-Te"]
ASCEND_VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"
NO_SMI = "nvidia-smi is not installed (name PCI devices with --pci)"
NO_PCI = "no PCI device given (name them with --pci)"


def read_topology(
    host: Host, device_type: str | None = None, pci: Sequence[str] | None = None
) -> Topology:
    """Everything the planners need about `host`, for whatever family it is.

    The family is `pci` when PCI addresses are given, else `device_type`, else the
    host's recorded one, else told from what is installed: npu-smi (then the chip names),
    nvidia-smi, or nothing (a plain host: CPUs and nodes only, family None).
    """
    host = read_once(host)
    family = normalize_family(device_type) if device_type else None
    if family is None and host.device_type:
        family = normalize_family(host.device_type)
    if pci is None and family == "pci":
        pci = recorded_pci(host)  # `snapshot --pci ADDR` replays with those addresses
    topo = _read(host, family, pci)
    return topo if host.is_live else replace(topo, recorded=True)


def _read(host: Host, family: str | None, pci: Sequence[str] | None) -> Topology:
    if family not in ("pci", "nvidia") and pci is None:
        map_res, info_res, *_ = host.run_many([NPU_MAP, NPU_INFO, NPU_TOPO, LSCPU_NODES, LSCPU])
        if family is not None or map_res is not None or info_res is not None:
            return read_ascend_topology(host, family)
    # A GPU host's topology, else a plain one. The GPU readers and their parsers load only
    # here: an Ascend `plan` does not pay for them at start-up.
    from accelhost.readers.gpu import read_gpu_topology

    if pci is None and family == "pci":
        return plain_topology(host, family, notes=(NO_PCI,))
    # None only without addresses, on a host without nvidia-smi: family None or nvidia
    found = read_gpu_topology(host, pci)
    return found or plain_topology(host, family, notes=(NO_SMI,) if family == "nvidia" else ())


def plain_topology(host: Host, family: str | None = None, notes: Sequence[str] = ()) -> Topology:
    """CPUs and NUMA nodes of a host with no accelerator we can see.

    Nodes come from lscpu as on Ascend hosts, from sysfs where lscpu is missing.
    """
    nodes = parse_cpu_nodes(stdout(host, LSCPU_NODES))
    if not nodes[0]:
        from accelhost.readers.gpu import read_sysfs_topology

        found: list[str] = []
        base = read_sysfs_topology(host, found)
        return replace(
            base,
            family=family,
            threads_per_core=parse_threads_per_core(stdout(host, LSCPU)) or base.threads_per_core,
            notes=(*notes, *found),
        )
    return _lscpu_topology(host, family, nodes, read_allowed_cpus(host) or (), notes=tuple(notes))


def _lscpu_topology(
    host: Host,
    family: str | None,
    nodes: tuple[Mapping[int, int], dict[int, tuple[int, ...]]],
    allowed: tuple[int, ...],
    **fields: Any,
) -> Topology:
    """A topology of lscpu's CPUs and nodes (`nodes`: what `parse_cpu_nodes` gave), with
    the cgroup cpuset and `fields` (an Ascend host's devices)."""
    cpuset = read_cgroup_cpuset(host)
    return Topology(
        machine=host.machine,
        family=family,
        allowed_cpus=allowed,
        cpu_node=nodes[0],
        node_cpus=nodes[1],
        cpuset=cpuset[0] if cpuset else None,
        threads_per_core=parse_threads_per_core(stdout(host, LSCPU)),
        **fields,
    )


def _failed(argv: list[str], result: CommandResult | None, told: bool) -> tuple[str, ...]:
    """Why `argv` told nothing: a failed npu-smi (no driver, a wedged device) is no NPU
    known, not no NPU."""
    if told or result is None or result.ok:
        return ()
    return (f"`{' '.join(argv)}` failed with status {result.rc}",)


def read_ascend_topology(host: Host, family: str | None) -> Topology:
    """The Ascend topology of `host`; `family` None is told from the chip names."""
    map_res, info_res = host.run(NPU_MAP), host.run(NPU_INFO)
    try:
        entries = parse_npu_map(map_res.stdout if map_res else None)
    except ParseError:
        if map_res is None or map_res.ok:
            raise
        entries = []  # a failed tool's words (`dcmi module initialize failed`): in `unread`
    info = parse_npu_smi_info(info_res.stdout if info_res else None)
    unread = _failed(NPU_MAP, map_res, bool(entries))
    unread += _failed(NPU_INFO, info_res, bool(info.chips))
    notes: list[str] = []
    if family is None:
        family = family_from_chip_names([e.name for e in entries] + list(info.names))
        if family is None and (entries or info.chips):
            notes.append("cannot tell the Ascend family from the chip names; pass --device-type")
    nodes = parse_cpu_nodes(stdout(host, LSCPU_NODES))
    bus = {(c.npu_id, c.chip_id): c.bus_id for c in info.chips}
    # positional and keyed by a C getter: this runs for every chip on every plan
    accelerators = tuple(
        Accelerator(e.logical_id, e.name, e.npu_id, e.chip_id, bus.get((e.npu_id, e.chip_id)))
        for e in sorted(entries, key=itemgetter(2))  # by logical id
    )
    tids: tuple[int, ...] = ()
    if family == "950":
        tids = tuple(parse_thread_ids(stdout(host, PS_THREADS)))
    return _lscpu_topology(
        host,
        family,
        nodes,
        ascend_allowed_cpus(host),
        accelerators=accelerators,
        affinity=parse_npu_topo(stdout(host, NPU_TOPO)),
        processes=info.processes,
        process_table_npu_id=info.id_column == "NPU ID",
        visible_env=host.getenv(ASCEND_VISIBLE),
        host_thread_tids=tids,
        notes=tuple(notes),
        unread=unread,
    )


def ascend_allowed_cpus(host: Host) -> tuple[int, ...]:
    """vllm-ascend's rule: no status file is no CPU, a status without the line an error."""
    allowed = read_allowed_cpus(host)
    if allowed is not None:
        return allowed
    if host.read_file(STATUS) is None:
        return ()
    raise ParseError(STATUS, MISSING_LINE)
