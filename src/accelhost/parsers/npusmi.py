"""`npu-smi` output: the chip and process tables (`info`), card / chip ids -> logical ids
(`info -m`), CPU affinity (`info -t topo`) and one chip's PCI address (`info -t board`).

`npu-smi info`: the process section starts at the first line (stripped) that begins with
`| NPU` and contains `Process id`; its first cell is `NPU Chip` (A2, A3, 310P) or `NPU ID`
(950). Every later stripped line beginning with `| ` is a row: split on `|`, rows with
fewer than two cells (`| No running processes found in NPU 3 |`) and non-numeric ids are
skipped.

`npu-smi info -m`: the header is split on runs of two or more spaces and the columns are
found by name: `NPU ID` (required), `Chip ID` and `Chip Logic ID` (optional). No `Chip ID`
-> chip 0; no `Chip Logic ID` (Ascend 950) -> logical id = NPU ID. `Mcu` rows (logical id
`-`) and other non-numeric rows are skipped.

`npu-smi info -t topo`: only lines starting with `NPU` at column 0 count; their first token
is `NPU<n>` and their last token must be a CPU list. Indented header lines, `Legend:`
blocks and matrices with no CPU Affinity column give nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from accelhost.cpulist import MAX_DEVICES, MAX_PID, parse_cpulist
from accelhost.errors import ParseError
from accelhost.topology import DeviceProcess

_INFO = "npu-smi info"
_MAP = "npu-smi info -m"
_TOPO = "npu-smi info -t topo"
_COLUMNS = re.compile(r"\s{2,}")  # of the -m header
# An NPU (card) id is a DCMI card id, not a count: 310P hosts print 32768, 32896, ...
MAX_CARD_ID = 1 << 16


class NpuChip(NamedTuple):
    """One chip of the upper table. Memory is the last `used / total` pair (HBM on A2/A3)."""

    npu_id: int
    chip_id: int
    name: str = ""
    bus_id: str | None = None
    hbm_used_mb: int | None = None
    hbm_total_mb: int | None = None
    health: str | None = None
    # A3 (`Chip  Phy-ID`): the N of /dev/davinciN, which a container keeps from its host
    phy_id: int | None = None


@dataclass(frozen=True)
class NpuSmiInfo:
    chips: tuple[NpuChip, ...] = ()
    processes: tuple[DeviceProcess, ...] = ()
    # "NPU Chip" or "NPU ID": how the process table names a device; None without a table.
    id_column: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c.name for c in self.chips if c.name))


def _cells(line: str) -> list[str]:
    """The cells of a table row, unstripped: a busy host's rows strip only what is read."""
    parts = line.split("|")
    return parts[1:-1] if len(parts) > 2 else parts[1:]


def parse_npu_smi_info(text: str | None) -> NpuSmiInfo:
    """Chips and processes; ids beyond what a host can have are a ParseError."""
    if not text:
        return NpuSmiInfo()
    try:
        return _parse(text)
    except ValueError:  # int() of a number thousands of digits long
        raise ParseError(_INFO, "a number too long to be an id or a count") from None


def _parse(text: str) -> NpuSmiInfo:
    lines = text.splitlines()
    start = next(
        (i for i, ln in enumerate(lines) if "Process id" in ln and ln.strip().startswith("| NPU")),
        None,
    )
    chips = _parse_chips("\n" + "\n".join(lines if start is None else lines[:start]))
    if start is None:
        return NpuSmiInfo(chips=chips)
    header = [c.strip() for c in _cells(lines[start].strip())]
    id_column = " ".join(header[0].split()) if header else "NPU Chip"
    has_chip = id_column != "NPU ID"

    def col(name: str) -> int:
        """The index of the column whose header starts with `name`; past any row if none."""
        return next((i for i, cell in enumerate(header) if cell.lower().startswith(name)), 1 << 30)

    i_pid, i_name, i_mem = col("process id"), col("process name"), col("process memory")
    processes: list[DeviceProcess] = []
    for raw in lines[start + 1 :]:
        if "|" not in raw:  # a separator: the test below would skip it, at a higher cost
            continue
        line = raw.strip()
        if not (line.startswith("| ") and line[2:].lstrip()[:1].isdigit()):
            continue  # separators and `| No running processes found in NPU 3 |`
        cells = _cells(line)
        n = len(cells)
        if n < 2:
            continue
        ids = cells[0].split()
        if not ids or not ids[0].isdecimal():
            continue
        chip: int | None = None
        if has_chip:
            if len(ids) < 2 or not ids[1].isdecimal():
                continue
            chip = int(ids[1])
        npu = int(ids[0])
        pid_text = cells[i_pid].strip() if i_pid < n else ""
        mem_text = cells[i_mem].strip() if i_mem < n else ""
        pid = int(pid_text) if pid_text.isdecimal() else -1
        # comparisons, not calls: this loop runs for every process of a busy host
        if npu >= MAX_CARD_ID or (chip or 0) >= MAX_DEVICES or pid >= MAX_PID:
            raise ParseError(_INFO, f"an id beyond what a host can have in {line[:60]!r}")
        name = cells[i_name].strip() if i_name < n else ""
        mem = int(mem_text) if mem_text.isdecimal() else None
        processes.append(DeviceProcess(npu, chip, pid, name, mem))
    if len(processes) > MAX_PID:
        raise ParseError(_INFO, f"more than {MAX_PID} process rows")
    return NpuSmiInfo(chips=chips, processes=tuple(processes), id_column=id_column)


# A row of the upper table: `| <digits>[ <name>] | <cell> | <cell> |`. With a name it is an
# NPU's first row (`| 0  910B3 | OK | power temp hugepages |`), without one a chip row
# (`| 1 | 0000:C1:00.1 | aicore memory hbm |`). It starts at a line break rather than `^`
# (the text is given one in front): a literal first character lets the regex engine skip
# to the candidates instead of trying every position of the long separator lines.
_UPPER_ROW = re.compile(r"\n[ \t]*\| +([0-9]+)([ \t][^|\n]*)?\|([^|\n]*)\|([^|\n]*)\|")


def _parse_chips(text: str) -> tuple[NpuChip, ...]:
    """Chips of the upper table, each under the NPU row above it; every line of `text`
    begins with a line break."""
    chips: list[NpuChip] = []
    npu: int | None = None
    name = ""
    health: str | None = None
    phy_column = "Phy-ID" in text  # 310P's second number (Device) is a logic id
    for first, rest, second, third in _UPPER_ROW.findall(text):
        label = rest.strip()
        if label and not label.isdecimal():  # an NPU row: id, name, health
            npu = int(first)
            name, health = " ".join(label.split()), second.strip() or None
            continue
        if npu is None:
            continue
        # the last `used / total` of the third cell (`0  0 / 0  3400 / 65536` -> 3400,
        # 65536), written out here: this runs for every chip
        used = total = None
        pair = third.rsplit("/", 2)
        if len(pair) > 1:
            before, after = pair[-2].split(), pair[-1].split()
            if before and after and before[-1].isdecimal() and after[0].isdecimal():
                used, total = int(before[-1]), int(after[0])
        bus_cell = second.split()
        bus = bus_cell[0].lower() if bus_cell and ":" in bus_cell[0] else None  # 310B: NA
        chip = int(first)
        phy = int(label) if label and phy_column else None
        if npu >= MAX_CARD_ID or chip >= MAX_DEVICES or (phy or 0) >= MAX_DEVICES:
            raise ParseError(_INFO, f"a chip id beyond what a host can have: {first[:20]}")
        chips.append(NpuChip(npu, chip, name, bus, used, total, health, phy))
    if len(chips) > MAX_DEVICES:
        raise ParseError(_INFO, f"more than {MAX_DEVICES} chips")
    return tuple(chips)


class MapEntry(NamedTuple):
    npu_id: int
    chip_id: int
    logical_id: int
    name: str = ""


def parse_npu_map(text: str | None) -> list[MapEntry]:
    """Entries in file order (the caller sorts by logical id where needed)."""
    lines = (text or "").splitlines()
    # the header is the first line that is not blank; blank rows give no cells below
    first = next((i for i, ln in enumerate(lines) if not ln.isspace() and ln), None)
    if first is None:
        return []
    header = _COLUMNS.split(lines[first].strip())
    if "NPU ID" not in header:
        raise ParseError(_MAP, f"no 'NPU ID' column in header {lines[first].strip()!r}")
    i_npu = header.index("NPU ID")
    i_chip = header.index("Chip ID") if "Chip ID" in header else None
    i_logic = header.index("Chip Logic ID") if "Chip Logic ID" in header else None
    i_name = header.index("Chip Name") if "Chip Name" in header else None
    entries: list[MapEntry] = []
    for line in lines[first + 1 :]:
        cells = line.split()
        try:
            npu_text = cells[i_npu]
            chip_text = cells[i_chip] if i_chip is not None else "0"
            logic_text = cells[i_logic] if i_logic is not None else npu_text
        except IndexError:
            continue
        if not (logic_text.isdecimal() and npu_text.isdecimal() and chip_text.isdecimal()):
            continue
        name = " ".join(cells[i_name:]) if i_name is not None and i_name < len(cells) else ""
        try:
            npu, chip, logic = int(npu_text), int(chip_text), int(logic_text)
        except ValueError:  # thousands of digits
            npu = chip = logic = MAX_CARD_ID
        if npu >= MAX_CARD_ID or chip >= MAX_DEVICES or logic >= MAX_DEVICES:
            raise ParseError(_MAP, f"an id beyond what a host can have: {line.strip()[:60]!r}")
        entries.append(MapEntry(npu, chip, logic, name))
    if len(entries) > MAX_DEVICES:
        raise ParseError(_MAP, f"more than {MAX_DEVICES} chips")
    return entries


def parse_npu_topo(text: str | None) -> dict[int, tuple[int, ...]]:
    """NPU index -> affinity CPUs in written order."""
    out: dict[int, tuple[int, ...]] = {}
    # NPUs usually share a handful of affinity lists (all 16 on an A3): parse each once.
    seen: dict[str, tuple[int, ...] | None] = {}
    for line in (text or "").splitlines():
        if not line.startswith("NPU"):
            continue
        # only the first and the last token matter: no need to split the whole matrix row
        head, _, rest = line.partition(" ")
        first = head.split("\t", 1)[0]
        if not first[3:].isdecimal() or not rest.strip():
            continue
        last = line.rsplit(None, 1)[-1]
        if not last[:1].isdigit():
            continue
        if last not in seen:
            try:
                seen[last] = tuple(parse_cpulist(last, _TOPO))
            except ParseError:
                seen[last] = None
        cpus = seen[last]
        if cpus is not None:
            try:
                npu = int(first[3:])
            except ValueError:  # thousands of digits
                npu = MAX_DEVICES
            if npu >= MAX_DEVICES:
                raise ParseError(_TOPO, f"NPU id beyond what a host can have: {first[:20]!r}")
            out[npu] = cpus
    return out


def parse_board_pci(text: str | None) -> str | None:
    """Last token of the `PCIe Bus Info` line, lower-cased; None when absent."""
    for line in (text or "").splitlines():
        if "PCIe Bus Info" in line:
            return line.split()[-1].lower()  # the line holds at least those three words
    return None


def board_command(logical_id: int, family: str | None) -> list[str]:
    """The board query of a logical NPU: A3 cards hold two chips (`-i N//2 -c N%2`)."""
    board = ["npu-smi", "info", "-t", "board", "-i"]
    if family == "A3":
        return [*board, str(logical_id // 2), "-c", str(logical_id % 2)]
    return [*board, str(logical_id)]
