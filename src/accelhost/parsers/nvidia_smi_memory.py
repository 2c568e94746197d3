"""`nvidia-smi` CSV queries for device memory and the processes that hold it.

Queried with `--format=csv,noheader,nounits`, so values are bare MiB numbers; a value the
driver cannot give prints as `[N/A]`, `[Not Supported]` or (some fields, some drivers) a
bare `N/A` and becomes None here (unknown is never read as zero: an unknown device is not
an idle device).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from accelhost.errors import ParseError
from accelhost.parsers.sysfs import normalize_pci_address

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
