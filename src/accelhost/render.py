"""Text for people: a plain aligned table, the ground floor every command's output is built on.

Columns padded to their widest cell, a dashed rule under the headers, no trailing blanks
(safe for pipes, logs and bug reports). Pure: the width to fit and whether to colour are
the caller's. Colour is chosen cell by cell (`paint`, e.g. `colour_status` for FAIL and
WARN), applied after padding so escape codes never shift a column; the command line asks
for it only on a terminal. The library's reports and the command line use it alike, so it
imports nothing of accelhost: no arrow runs from here up to `accelhost.cli` or back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from itertools import zip_longest
from typing import Any, TextIO

# (column index, padded cell) -> the cell as printed
Paint = Callable[[int, str], str]


def isatty(stream: TextIO) -> bool:
    """Whether `stream` is a terminal; False for anything that cannot say (a closed file,
    a test's stand-in without `isatty`)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    paint: Paint | None = None,
    columns: int | None = None,
) -> str:
    """Headers, a rule, then one line per row; None shows as an empty cell. Within
    `columns` when given: the widest columns are narrowed and their cells continue on the
    lines below, broken after a comma, blank or hyphen (a CPU list `0,2,4,...` of 66
    characters, a GPU UUID)."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if columns is not None:
        widths = _narrowed(cells, widths, columns)
        cells = [cells[0], *(line for row in cells[1:] for line in _wrapped(row, widths))]
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


def _narrowed(cells: list[list[str]], widths: list[int], columns: int) -> list[int]:
    """`widths` with the widest column taken down one character at a time until the
    table (two blanks between columns) fits `columns`, or nothing can give more (no column
    goes below its header or 8 characters). Lists (cells with a comma or blank) give first:
    a UUID or a path is cut only if they cannot."""
    out = list(widths)
    floor = [max(len(h), 8) for h in cells[0]]
    lists = {i for row in cells[1:] for i, c in enumerate(row) if re.search(r"[, ]", c)}
    while sum(out) + 2 * (len(out) - 1) > columns:
        can = [i for i, w in enumerate(out) if w > floor[i]]
        if not can:
            break
        first = [i for i in can if i in lists] or can
        out[max(first, key=lambda i: out[i])] -= 1
    return out


def _pieces(cell: str, width: int) -> list[str]:
    """`cell` in lines of at most `width`, broken after a comma, blank or hyphen; a
    piece longer than a line is cut."""
    lines = [""]
    for piece in re.split(r"(?<=[, -])", cell):
        while len(piece) > width:
            if lines[-1]:
                lines.append("")
            lines[-1], piece = piece[:width], piece[width:]
            lines.append("")
        if len(lines[-1]) + len(piece) > width and lines[-1]:
            lines.append("")
        lines[-1] += piece
    return [line.rstrip() for line in lines if line.strip()] or [""]


def _wrapped(row: list[str], widths: list[int]) -> list[list[str]]:
    """One row as the lines it takes once its cells are wrapped to `widths`."""
    parts = [_pieces(c, w) if len(c) > w else [c] for c, w in zip(row, widths, strict=True)]
    return [list(line) for line in zip_longest(*parts, fillvalue="")]


ANSI = {"FAIL": "\x1b[1;31m", "WARN": "\x1b[33m"}  # bold red, yellow
RESET = "\x1b[0m"


def colour_status(cell: str) -> str:
    """FAIL in bold red, WARN in yellow; anything else as it is (padding kept outside)."""
    word = cell.strip()
    code = ANSI.get(word)
    return cell if code is None else cell.replace(word, f"{code}{word}{RESET}", 1)
