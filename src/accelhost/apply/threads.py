"""Threads of a process, which plan role each one gets, and their CPU affinity.

Plain `os` calls on /proc and `sched_setaffinity(tid)`: no taskset or ps, and fast enough
to pin a 500-thread engine in a few milliseconds (benchmarks/bind.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accelhost.errors import ApplyError
from accelhost.plans import ThreadRole

# The kernel keeps 15 bytes of a thread name (TASK_COMM_LEN - 1).
COMM_LEN = 15
_REGEX_META = set(".^$*+?{}[]\\|()")


@dataclass(frozen=True)
class ThreadInfo:
    tid: int
    name: str


@dataclass(frozen=True)
class Assignment:
    """The CPUs one thread should end up on, and the role that chose them."""

    tid: int
    name: str
    role: str
    cpus: tuple[int, ...]


class RoleMatcher:
    """Decides whether a thread name belongs to a role.

    Patterns are regular expressions, searched. A literal pattern longer than the kernel's
    15-byte name (`uvb_poll_window_thread`) also matches its truncated form, which is all
    /proc ever shows of it.
    """

    def __init__(self, role: ThreadRole) -> None:
        self.role = role
        self._regex = re.compile(role.pattern)
        literal = not (_REGEX_META & set(role.pattern))
        self._truncated = role.pattern[:COMM_LEN] if literal and len(role.pattern) > COMM_LEN else None

    def matches(self, name: str) -> bool:
        if self._regex.search(name):
            return True
        return self._truncated is not None and self._truncated in name


def read_comm(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 64).decode("utf-8", "replace").rstrip("\n")
    except OSError:
        return None
    finally:
        os.close(fd)


def list_threads(pid: int, proc: str = "/proc") -> list[ThreadInfo]:
    """Every thread of `pid` with its name, ascending; ApplyError when the process is gone."""
    base = f"{proc}/{pid}/task"
    try:
        names = os.listdir(base)
    except FileNotFoundError:
        raise ApplyError(f"process {pid} does not exist") from None
    except OSError as exc:
        raise ApplyError(f"cannot list the threads of process {pid}: {exc.strerror}") from None
    out = []
    for entry in sorted(int(n) for n in names if n.isdigit()):
        name = read_comm(f"{base}/{entry}/comm")
        if name is not None:  # a thread that exited while we listed
            out.append(ThreadInfo(entry, name))
    return out


def assign(
    threads: Iterable[ThreadInfo], main: Sequence[int], roles: Sequence[ThreadRole]
) -> list[Assignment]:
    """Every thread gets `main`; a thread matching a role gets that role's CPUs (later wins).

    Threads of no role with an empty `main` are left alone (nothing to pin them to).
    """
    matchers = [RoleMatcher(r) for r in roles if r.cpus]
    main_cpus = tuple(main)
    out = []
    for t in threads:
        role, cpus = "main", main_cpus
        for m in matchers:
            if m.matches(t.name):
                role, cpus = m.role.name, m.role.cpus
        if cpus:
            out.append(Assignment(t.tid, t.name, role, cpus))
    return out


def set_affinity(tid: int, cpus: Iterable[int]) -> tuple[int, ...]:
    """Pin one thread and return what the kernel actually set (it intersects with the cpuset)."""
    os.sched_setaffinity(tid, cpus)
    return tuple(sorted(os.sched_getaffinity(tid)))


def get_affinity(tid: int) -> tuple[int, ...] | None:
    try:
        return tuple(sorted(os.sched_getaffinity(tid)))
    except OSError:
        return None


def scan_named_threads(matcher: RoleMatcher, proc: str = "/proc") -> list[tuple[int, int, str]]:
    """(pid, tid, name) of every thread on the host whose name matches (950 UVB threads)."""
    out = []
    try:
        pids = [int(n) for n in os.listdir(proc) if n.isdigit()]
    except OSError:
        return out
    for pid in sorted(pids):
        try:
            tids = [int(n) for n in os.listdir(f"{proc}/{pid}/task") if n.isdigit()]
        except OSError:
            continue
        for tid in sorted(tids):
            name = read_comm(f"{proc}/{pid}/task/{tid}/comm")
            if name is not None and matcher.matches(name):
                out.append((pid, tid, name))
    return out
