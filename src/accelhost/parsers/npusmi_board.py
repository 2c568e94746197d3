"""`npu-smi info -t board -i N [-c C]`: the PCI address of one NPU chip."""

from __future__ import annotations


def parse_board_pci(text: str | None) -> str | None:
    """Last token of the `PCIe Bus Info` line, lower-cased; None when absent."""
    if not text:
        return None
    for line in text.splitlines():
        if "PCIe Bus Info" in line:
            return line.split()[-1].lower()  # the line holds at least those three words
    return None


def board_command(logical_id: int, family: str | None) -> list[str]:
    """The board query of a logical NPU: A3 cards hold two chips (`-i N//2 -c N%2`)."""
    board = ["npu-smi", "info", "-t", "board", "-i"]
    if family == "A3":
        return [*board, str(logical_id // 2), "-c", str(logical_id % 2)]
    return [*board, str(logical_id)]
