"""`accelhost topo`: what this host (or a recorded one) looks like."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from accelhost import formats
from accelhost.cli import options
from accelhost.cli.common import (
    command,
    host_from_args,
    pci_from_args,
    print_json,
    terminal_columns,
)
from accelhost.cpulist import format_cpulist
from accelhost.render import render_table
from accelhost.topology import Topology

DESCRIPTION = (
    "Show what this host looks like: CPUs, NUMA nodes with their CPU ranges, the allowed CPUs (and "
    "the cgroup cpuset when it differs), accelerators and their CPU affinity."
)
# what `topo --json` shows of an Accelerator (its provenance fields are the planner's)
ACCELERATOR_KEYS = ("index", "name", "npu_id", "chip_id", "pci", "numa_node", "uuid")


def topology_dict(topo: Topology) -> dict[str, Any]:
    """The JSON of `topo --json`: CPU lists as arrays, nodes and devices keyed by id."""
    return {
        "format": formats.TOPO,
        "machine": topo.machine,
        "family": topo.family,
        "cpus": sorted(topo.cpu_node) or sorted(topo.allowed_cpus),
        "numa_nodes": {str(n): list(c) for n, c in sorted(topo.node_cpus.items())},
        "allowed_cpus": list(topo.allowed_cpus),
        "cgroup_cpuset": None if topo.cpuset is None else list(topo.cpuset),
        "threads_per_core": topo.threads_per_core,
        "accelerators": [
            {
                **{k: getattr(a, k) for k in ACCELERATOR_KEYS},
                "affinity": list(topo.affinity.get(a.index, ())),
            }
            for a in topo.accelerators
        ],
        "processes": [
            {
                **{k: getattr(p, k) for k in ("npu_id", "chip_id", "pid", "name")},
                "memory_bytes": None if p.memory_mb is None else p.memory_mb * formats.MIB,
            }
            for p in topo.processes
        ],
        "notes": list(topo.notes),
        "unread": list(topo.unread),
    }


def render_topology(topo: Topology, columns: int | None = None) -> str:
    """The text of `topo`; its tables within `columns` when given (a terminal's width)."""
    cpus = sorted(topo.cpu_node) or sorted(topo.allowed_cpus)
    lines = [
        f"machine      {topo.machine}",
        f"CPUs         {len(cpus)} ({format_cpulist(cpus) or 'unknown'})"
        + (f", {topo.threads_per_core} thread(s) per core" if topo.threads_per_core else ""),
        f"allowed      {format_cpulist(topo.allowed_cpus) or 'none'}",
    ]
    if topo.cpuset is not None and sorted(set(topo.cpuset)) != sorted(set(topo.allowed_cpus)):
        lines.append(
            f"cgroup cpuset {format_cpulist(topo.cpuset)} (differs from the allowed CPUs: "
            "something pinned this process; OMP_PROC_BIND?)"
        )
    lines.append("")
    node_rows = [
        (
            node,
            len(cpus_),
            format_cpulist(cpus_),
            format_cpulist(c for c in cpus_ if c in set(topo.allowed_cpus)) or "-",
        )
        for node, cpus_ in sorted(topo.node_cpus.items())
    ]
    if node_rows:
        lines.append(render_table(["node", "cpus", "range", "allowed"], node_rows, columns=columns))
    else:
        lines.append("NUMA nodes: unknown (lscpu and sysfs give none)")
    lines.append("")
    if topo.accelerators:
        headers, rows = _device_rows(topo)
        lines.append(f"accelerators: {len(rows)} ({topo.family or 'unknown family'})")
        lines.append(render_table(headers, rows, columns=columns))
    elif topo.unread:
        lines.append("accelerators: cannot tell")
    else:
        family = f" ({topo.family})" if topo.family else ""
        lines.append(
            f"accelerators: none found{family} (no npu-smi, no nvidia-smi, no --pci device)"
        )
    lines.extend(f"note: {note}" for note in topo.notes)
    lines.extend(f"cannot tell: {why}" for why in topo.unread)
    return "\n".join(lines)


def _device_rows(topo: Topology) -> tuple[list[str], list[tuple[object, ...]]]:
    """The accelerators table: a GPU's (or --pci device's) uuid, an Ascend chip's npu/chip
    ids and whether a process runs on it."""
    if topo.family in ("nvidia", "pci"):
        return ["device", "pci", "numa", "affinity", "uuid"], [
            (
                acc.index,
                acc.pci or "-",
                "-" if acc.numa_node is None else acc.numa_node,
                format_cpulist(topo.affinity.get(acc.index, ())) or "-",
                acc.uuid or "-",
            )
            for acc in topo.accelerators
        ]
    running = {(p.npu_id, p.chip_id) for p in topo.processes}
    running_npu = {p.npu_id for p in topo.processes}
    rows: list[tuple[object, ...]] = []
    for acc in topo.accelerators:
        aff = topo.affinity.get(acc.index, ())
        nodes = sorted({topo.cpu_node[c] for c in aff if c in topo.cpu_node})
        busy = (acc.npu_id, acc.chip_id) in running or (
            topo.process_table_npu_id and acc.npu_id in running_npu
        )
        rows.append(
            (
                acc.index,
                acc.name or "-",
                "-" if acc.npu_id is None else f"{acc.npu_id}/{acc.chip_id or 0}",
                acc.pci or "-",
                format_cpulist(aff) or "-",
                ",".join(map(str, nodes)) or "-",
                "?" if topo.unread and not busy else "yes" if busy else "no",
            )
        )
    return ["device", "name", "npu/chip", "pci", "affinity", "nodes", "in use"], rows


def run_topo(args: argparse.Namespace) -> int:
    from accelhost.readers.topology import read_topology

    pci = pci_from_args(args)
    topo = read_topology(host_from_args(args), device_type=args.device_type, pci=pci)
    if args.json:
        print_json(topology_dict(topo))
    else:
        print(render_topology(topo, terminal_columns(sys.stdout)))
    return 1 if topo.unread else 0  # a device tool that failed: no device known, not none


def build_topo(parser: argparse.ArgumentParser) -> None:
    command(parser, run_topo, DESCRIPTION)
    options.snapshot(parser)
    options.device_type(parser)
    options.pci(parser)
    options.json_output(parser)
