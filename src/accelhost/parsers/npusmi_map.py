"""`npu-smi info -m`: card / chip ids -> global logical NPU ids.

The header is split on runs of two or more spaces and the columns are found by name:
`NPU ID` (required), `Chip ID` and `Chip Logic ID` (optional). No `Chip ID` -> chip 0;
no `Chip Logic ID` (Ascend 950) -> logical id = NPU ID. `Mcu` rows (logical id `-`) and
other non-numeric rows are skipped.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from accelhost.cpulist import MAX_DEVICES
from accelhost.errors import ParseError
from accelhost.parsers.npusmi_info import MAX_CARD_ID

SOURCE = "npu-smi info -m"
_COLUMNS = re.compile(r"\s{2,}")


class MapEntry(NamedTuple):
    npu_id: int
    chip_id: int
    logical_id: int
    name: str = ""


def parse_npu_map(text: str | None) -> list[MapEntry]:
    """Entries in file order (the caller sorts by logical id where needed)."""
    if not text:
        return []
    lines = text.splitlines()
    # the header is the first line that is not blank; blank rows give no cells below
    first = next((i for i, ln in enumerate(lines) if not ln.isspace() and ln), None)
    if first is None:
        return []
    header = _COLUMNS.split(lines[first].strip())
    if "NPU ID" not in header:
        raise ParseError(SOURCE, f"no 'NPU ID' column in header {lines[first].strip()!r}")
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
            raise ParseError(SOURCE, f"an id beyond what a host can have: {line.strip()[:60]!r}")
        entries.append(MapEntry(npu, chip, logic, name))
    if len(entries) > MAX_DEVICES:
        raise ParseError(SOURCE, f"more than {MAX_DEVICES} chips")
    return entries
