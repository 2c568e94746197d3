"""`ps -Te`: thread ids of the host's UVB poll threads (Ascend 950)."""

from __future__ import annotations

from accelhost.cpulist import MAX_PID

UVB_THREAD = "uvb_poll_window_thread"


def parse_thread_ids(text: str | None, name: str = UVB_THREAD) -> list[int]:
    """Thread ids (the SPID column) of lines naming `name`, in file order."""
    tids = []
    for line in (text or "").splitlines():
        if name in line:
            cols = line.split()
            tid = cols[1] if len(cols) > 1 else ""
            if tid.isascii() and tid.isdigit() and len(tid) <= 7 and int(tid) < MAX_PID:
                tids.append(int(tid))
    return tids


def keep_thread_lines(text: str, name: str = UVB_THREAD) -> str:
    """What a snapshot keeps of `ps -Te`: the header and the lines that name `name`."""
    lines = text.splitlines()
    kept = lines[:1] + [ln for ln in lines[1:] if name in ln]
    return "\n".join(kept) + ("\n" if kept else "")
