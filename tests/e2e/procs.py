"""Reading this machine's processes and /dev/shm files for the scenarios (stdlib only).

A pid is identified with its start time (field 22 of /proc/PID/stat), so a pid that the
kernel reused for another process is never taken for ours, and never killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable
from pathlib import Path

SHM_DIR = "/dev/shm/"


def start_time(pid: int) -> int | None:
    """The start time (clock ticks after boot) of `pid`, None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    rest = raw[raw.rindex(")") + 2 :].split()
    return int(rest[19])


def state(pid: int) -> str | None:
    """The one-letter state of `pid` (Z for a zombie), None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2 :].split()[0]


def parent(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(raw[raw.rindex(")") + 2 :].split()[1])


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def children_of() -> dict[int, list[int]]:
    """Every live process's children, from one pass over /proc."""
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            ppid = parent(int(name))
            if ppid is not None:
                kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(roots: Iterable[int]) -> set[int]:
    """`roots` (those alive) and all their live descendants."""
    kids = children_of()
    seen: set[int] = set()
    todo = [p for p in roots if start_time(p) is not None]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(kids.get(pid, ()))
    return seen


def shm_files_held(pids: Iterable[int], directory: str = SHM_DIR) -> set[str]:
    """/dev/shm files that `pids` hold open or mapped, by name or by inode: glibc's
    sem_open makes a semaphore under a temporary name and links it to its own, so its
    creator maps `sem.XXXXXX (deleted)`, the file `sem.mp-*` is (each vLLM Worker holds its
    semaphore only so). `directory` is where this process reaches that /dev/shm (a
    container's private one: /proc/PID/root/dev/shm/); paths come back as /dev/shm/NAME."""
    found: set[str] = set()
    inodes: set[tuple[int, int]] = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith(SHM_DIR):
                        st = os.stat(f"/proc/{pid}/fd/{fd}")
                        inodes.add((st.st_dev, st.st_ino))
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                fields = line.split(None, 5)
                if len(fields) == 6 and fields[5].startswith(SHM_DIR):
                    major, minor = (int(x, 16) for x in fields[3].split(":"))
                    inodes.add((os.makedev(major, minor), int(fields[4])))
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if (st.st_dev, st.st_ino) in inodes:
                    found.add(SHM_DIR + entry.name)
    return found


def wait_for(
    what: str, condition: Callable[[], object], timeout: float, every: float = 0.5
) -> object:
    """Poll `condition` until it returns something true; fail with `what` past `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


class Tracked:
    """Processes a test started, by (pid, start time): the only ones it may signal."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}

    def add(self, pids: Iterable[int]) -> None:
        for pid in pids:
            started = start_time(pid)
            if started is not None:
                self.seen.setdefault(pid, started)

    def is_alive(self, pid: int) -> bool:
        """Still the same process and not a zombie."""
        return start_time(pid) == self.seen.get(pid) and state(pid) not in (None, "Z")

    def alive(self) -> set[int]:
        return {pid for pid in self.seen if self.is_alive(pid)}

    def signal(self, pids: Iterable[int], sig: int) -> None:
        for pid in pids:
            if pid in self.seen and self.is_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def kill_all(self) -> None:
        """SIGKILL whatever is still alive of it (the finally of every server)."""
        self.signal(self.alive(), signal.SIGKILL)
