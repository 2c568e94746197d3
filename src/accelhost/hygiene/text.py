"""Short, one-line renderings for people: command lines and byte counts.

Command lines can hold whole scripts (`python -c "..."`); a table row or a log line needs
one line. JSON output keeps the full command line.
"""

from __future__ import annotations

from accelhost.formats import human_bytes  # one rendering of bytes for every command

__all__ = ["file_bytes", "human_bytes", "one_line"]

PAGE = 4096  # a tmpfs file takes whole pages


def file_bytes(used: int, size: int) -> str:
    """What a /dev/shm file takes, truthfully for both kinds: a sparse queue uses less than
    its apparent size ("4.0 MiB used (of 240.0 MiB)"), and a 32-byte semaphore takes a
    whole page, more than its size: "32 B (one 4.0 KiB page)", never "4.0 KiB used (of 32 B)".
    """
    if used <= size:
        return f"{human_bytes(used)} used (of {human_bytes(size)})"
    pages = "one 4.0 KiB page" if used == PAGE else f"{human_bytes(used)} in whole pages"
    return f"{human_bytes(size)} ({pages})"


def one_line(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."
