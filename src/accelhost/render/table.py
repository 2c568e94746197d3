"""A plain aligned table: columns padded to their widest cell, a dashed rule under the
headers, no trailing blanks (safe for pipes, logs and bug reports).

Colour is the caller's choice, cell by cell (`paint`), applied after padding so escape
codes never shift a column; the command line asks for it only on a terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# (column index, padded cell) -> the cell as printed
Paint = Callable[[int, str], str]


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], paint: Paint | None = None
) -> str:
    """Headers, a rule, then one line per row; None shows as an empty cell."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        padded = [c.ljust(w) for c, w in zip(row, widths, strict=True)]
        if n and paint is not None:
            padded = [paint(i, c) for i, c in enumerate(padded)]
        lines.append("  ".join(padded).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


ANSI = {"FAIL": "\x1b[1;31m", "WARN": "\x1b[33m"}  # bold red, yellow
RESET = "\x1b[0m"


def colour_status(cell: str) -> str:
    """FAIL in bold red, WARN in yellow; anything else as it is (padding kept outside)."""
    word = cell.strip()
    code = ANSI.get(word)
    return cell if code is None else cell.replace(word, f"{code}{word}{RESET}", 1)
