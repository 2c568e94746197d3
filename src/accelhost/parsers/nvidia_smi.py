"""nvidia-smi output: the GPU list (`--query-gpu` CSV), the `topo -m` matrix, and the
memory queries (device memory, the processes holding it).

Placement needs only the index, PCI address and UUID of each GPU and the CPU and NUMA
affinity columns of the matrix (a fallback where sysfs lacks them). The memory queries run
with `--format=csv,noheader,nounits`, so values are bare MiB numbers; a value the driver
cannot give prints as `[N/A]`, `[Not Supported]` or (some fields, some drivers) a bare
`N/A` and becomes None (unknown is never read as zero: an unknown device is not an idle
device).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from accelhost.cpulist import MAX_DEVICES, parse_cpulist, parse_id
from accelhost.errors import ParseError
from accelhost.parsers.sysfs import normalize_pci_address

# Exactly these command lines: snapshots key commands by their argv.
QUERY_GPU_ARGV = ("nvidia-smi", "--query-gpu=index,pci.bus_id,uuid", "--format=csv,noheader")
TOPO_ARGV = ("nvidia-smi", "topo", "-m")
GPU_QUERY = (
    "nvidia-smi",
    "--query-gpu=index,memory.used,memory.total",
    "--format=csv,noheader,nounits",
)
APPS_QUERY = (
    "nvidia-smi",
    "--query-compute-apps=pid,used_memory,gpu_bus_id",
    "--format=csv,noheader,nounits",
)

_ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")
_GPU_LABEL_RE = re.compile(r"^GPU([0-9]+)$")
_NOT_AVAILABLE = {"", "N/A", "[N/A]", "n/a"}


@dataclass(frozen=True)
class GpuRow:
    """One GPU as nvidia-smi numbers it (PCI bus order), with its sysfs PCI address."""

    index: int
    pci: str
    uuid: str | None


@dataclass(frozen=True)
class TopoAffinity:
    """The `CPU Affinity` / `NUMA Affinity` cells of one GPU row; None where `N/A`."""

    index: int
    cpus: tuple[int, ...] | None
    numa_nodes: tuple[int, ...] | None


def parse_query_gpu(text: str, source: str = "nvidia-smi --query-gpu") -> list[GpuRow]:
    """Rows `0, 00000000:1B:00.0, GPU-<uuid>`, sorted by index; duplicates are garbage."""
    rows: dict[int, GpuRow] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3:
            raise ParseError(source, f"line {number}: expected 3 fields, got {line.strip()!r}")
        raw_index, raw_pci, raw_uuid = cells
        if not raw_index.isdigit():
            raise ParseError(source, f"line {number}: GPU index {raw_index!r} is not a number")
        index = parse_id(raw_index, f"{source}, line {number}", MAX_DEVICES, "GPU index")
        if index in rows:
            raise ParseError(source, f"line {number}: GPU {index} listed twice")
        pci = normalize_pci_address(raw_pci, f"{source}, line {number}")
        uuid = None if raw_uuid in _NOT_AVAILABLE else raw_uuid
        rows[index] = GpuRow(index, pci, uuid)
    return [rows[i] for i in sorted(rows)]


def _cells(line: str) -> list[str]:
    """Cells of a matrix line: tab-separated as printed, or runs of 2+ spaces when a copy
    lost its tabs."""
    line = _ANSI_RE.sub("", line.rstrip("\n"))
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    return [c.strip() for c in re.split(r"\s{2,}", line.strip())]


def parse_topo_matrix(text: str, source: str = "nvidia-smi topo -m") -> dict[int, TopoAffinity]:
    """GPU index -> its affinity cells. A matrix without a `CPU Affinity` column gives {}.

    Older drivers print no `NUMA Affinity` column; newer ones add `GPU NUMA ID` after it,
    and some print an empty cell before that: columns are found by their header names.
    """
    lines = text.splitlines()
    header_at = next((i for i, ln in enumerate(lines) if "CPU Affinity" in ln), None)
    if header_at is None:
        return {}
    header = _cells(lines[header_at])
    if "CPU Affinity" not in header:  # the words inside some other cell: no such column
        return {}
    # a tab-separated header starts with the empty cell above the row labels
    offset = 0 if header and header[0] == "" else 1
    cpu_col = header.index("CPU Affinity") + offset
    numa_col = header.index("NUMA Affinity") + offset if "NUMA Affinity" in header else None
    out: dict[int, TopoAffinity] = {}
    for number, line in enumerate(lines[header_at + 1 :], header_at + 2):
        if line.startswith("Legend"):
            break
        cells = _cells(line)
        match = _GPU_LABEL_RE.match(cells[0]) if cells else None
        if match is None:
            continue
        index = parse_id(match[1], f"{source}, line {number}", MAX_DEVICES, "GPU index")
        if cpu_col >= len(cells):
            raise ParseError(source, f"line {number}: GPU{index} row has no CPU Affinity cell")
        cpus = _affinity_cell(cells[cpu_col], source, number)
        nodes = None
        if numa_col is not None and numa_col < len(cells):
            nodes = _affinity_cell(cells[numa_col], source, number)
        out[index] = TopoAffinity(index, cpus, nodes)
    return out


def _affinity_cell(cell: str, source: str, number: int) -> tuple[int, ...] | None:
    if cell in _NOT_AVAILABLE:
        return None
    try:
        return tuple(parse_cpulist(cell, source))
    except ParseError:
        raise ParseError(source, f"line {number}: not a CPU or node list: {cell!r}") from None


@dataclass(frozen=True)
class GpuMemory:
    index: int
    used_mib: int | None
    total_mib: int | None


@dataclass(frozen=True)
class GpuComputeApp:
    pid: int
    used_mib: int | None
    bus_id: str


def _number(cell: str, source: str, line_no: int) -> int | None:
    cell = cell.strip()
    if not cell or cell.startswith("[") or cell == "N/A":
        return None
    try:
        return int(float(cell))
    except (ValueError, OverflowError):  # `abc`, `nan`; `inf` and `1e999` overflow
        raise ParseError(source, f"line {line_no}: not a number: {cell!r}") from None


def _rows(text: str, query: tuple[str, ...]) -> Iterator[tuple[str, int, int | None, list[str]]]:
    """(source, line number, first cell as a number, cells) of each non-blank line; every
    line's width is checked before any number is read."""
    source = " ".join(query)
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3:
            raise ParseError(source, f"line {n} has {len(cells)} fields, expected 3")
        rows.append((n, cells))
    for n, cells in rows:
        yield source, n, _number(cells[0], source, n), cells


def normalize_bus_id(bus_id: str) -> str:
    """The sysfs form `--query-gpu` addresses get (`normalize_pci_address`): one GPU's id
    must compare equal in both queries, also where the domain is wider than 16 bits
    (Hyper-V GPUs print `03F8CFDD:00:00.0`)."""
    return normalize_pci_address(bus_id, " ".join(APPS_QUERY))


def parse_gpu_memory(text: str) -> list[GpuMemory]:
    out = []
    for source, n, index, cells in _rows(text, GPU_QUERY):
        if index is None:
            raise ParseError(source, f"line {n}: no GPU index")
        out.append(GpuMemory(index, _number(cells[1], source, n), _number(cells[2], source, n)))
    return out


def parse_compute_apps(text: str) -> list[GpuComputeApp]:
    return [
        GpuComputeApp(pid, _number(cells[1], source, n), normalize_bus_id(cells[2]))
        for source, n, pid, cells in _rows(text, APPS_QUERY)
        if pid is not None
    ]
