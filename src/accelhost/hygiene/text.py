"""Short, one-line renderings for people: command lines and byte counts.

Command lines can hold whole scripts (`python -c "..."`); a table row or a log line needs
one line. JSON output keeps the full command line.
"""

from __future__ import annotations


def one_line(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def human_bytes(n: int | float) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
