"""Short, one-line renderings for people: command lines and byte counts.

Command lines can hold whole scripts (`python -c "..."`); a table row or a log line needs
one line. JSON output keeps the full command line.
"""

from __future__ import annotations

from accelhost.formats import human_bytes  # one rendering of bytes for every command

__all__ = ["human_bytes", "one_line"]


def one_line(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
