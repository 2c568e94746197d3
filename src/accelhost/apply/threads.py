"""Threads of a process, which plan role each one gets, and their CPU affinity.

Plain `os` calls on /proc and `sched_setaffinity(tid)`: no taskset or ps, and fast enough
to pin a 500-thread engine in a few milliseconds (benchmarks/bind.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from accelhost.apply.steps import ThreadAffinity
from accelhost.errors import ApplyError
from accelhost.plans import ThreadRole
from accelhost.readers.procs import list_pids

if TYPE_CHECKING:
    from accelhost.host.base import Host

# The kernel keeps 15 bytes of a thread name (TASK_COMM_LEN - 1).
COMM_LEN = 15
_REGEX_META = set(".^$*+?{}[]\\|()")


class RoleMatcher:
    """Whether a thread name belongs to a role (a regular expression, searched). A literal
    longer than the kernel's 15-byte name (`uvb_poll_window_thread`) is matched by its
    first 15 bytes, which is all /proc ever shows of it."""

    def __init__(self, role: ThreadRole) -> None:
        self.role = role
        is_literal = not (_REGEX_META & set(role.pattern))
        try:
            self._regex = None if is_literal else re.compile(role.pattern)
        except re.error as exc:  # a hand-written plan's thread_roles: the user's mistake
            why = f"thread role {role.name!r}: bad pattern {role.pattern!r}: {exc}"
            raise ApplyError(why) from None
        self.literal = role.pattern[:COMM_LEN] if is_literal else None

    def matches(self, name: str) -> bool:
        if self.literal is not None:
            return self.literal in name
        assert self._regex is not None
        return self._regex.search(name) is not None


def _task_dir(pid: int) -> int:
    """An fd of /proc/<pid>/task; ApplyError when the process is gone."""
    try:
        return os.open(f"/proc/{pid}/task", os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise ApplyError(f"process {pid} does not exist") from None
    except OSError as exc:
        raise ApplyError(f"cannot list the threads of process {pid}: {exc.strerror}") from None


def list_threads(pid: int) -> list[tuple[int, str]]:
    """(tid, name) of every thread of `pid`, ascending; ApplyError when the process is gone."""
    dfd = _task_dir(pid)
    try:
        return list(_names(dfd))
    finally:
        os.close(dfd)


def _names(dfd: int, skip: AbstractSet[int] = frozenset()) -> Iterator[tuple[int, str]]:
    """(tid, name) of every thread under an open task directory but `skip`, ascending;
    threads that exit meanwhile are left out. Names are opened relative to the directory:
    on a 500-thread engine the path walk from /proc is most of the cost."""
    opn, rd, cls, rdonly = os.open, os.read, os.close, os.O_RDONLY  # the hot loop
    tids = sorted(int(n) for n in os.listdir(dfd) if n.isdigit())
    for tid in [t for t in tids if t not in skip] if skip else tids:
        try:
            fd = opn(f"{tid}/comm", rdonly, dir_fd=dfd)
        except OSError:
            continue
        try:
            raw = rd(fd, 64)
        except OSError:
            continue
        finally:
            cls(fd)
        try:  # comm is almost always valid UTF-8: the strict decode is the fast one
            name = raw.decode().rstrip("\n")
        except UnicodeDecodeError:
            name = raw.decode("utf-8", "replace").rstrip("\n")
        yield tid, name


def thread_steps(
    pid: int, main: Sequence[int], roles: Sequence[ThreadRole], skip: AbstractSet[int] = frozenset()
) -> list[ThreadAffinity]:
    """A ThreadAffinity step for every thread of `pid` but `skip` (the driver's retry rounds),
    in one pass (a bind's hot path): each gets `main`, or the CPUs of the last role it matches
    (sorted, unique: they compare with read-back affinities); with no CPUs, it is left alone."""
    dfd = _task_dir(pid)  # first: a gone process is the error to give
    out = []
    make = ThreadAffinity
    try:
        matchers = [(RoleMatcher(r), r.name, tuple(sorted(set(r.cpus)))) for r in roles if r.cpus]
        # The usual roles (acl_thread, release_thread) are literals: a substring test each.
        literals = [(m.literal, name, cpus) for m, name, cpus in matchers if m.literal is not None]
        only_literals = len(literals) == len(matchers)
        main_cpus = tuple(sorted(set(main)))
        for tid, name in _names(dfd, skip):
            role, cpus = "main", main_cpus
            if only_literals:
                for lit, role_name, role_cpus in literals:
                    if lit in name:
                        role, cpus = role_name, role_cpus
            else:
                for m, role_name, role_cpus in matchers:
                    if m.matches(name):
                        role, cpus = role_name, role_cpus
            if cpus:
                out.append(make(pid, tid, name, role, cpus))
        return out
    finally:
        os.close(dfd)


def scan_named_threads(matcher: RoleMatcher, host: Host) -> list[tuple[int, int, str]]:
    """(pid, tid, name) of every thread on the host whose name matches (950 UVB threads),
    through the host door: unlike a bind's own threads, this walk is not on the hot path."""
    out: list[tuple[int, int, str]] = []
    for pid in list_pids(host):
        tids = [int(n) for n in host.list_dir(f"/proc/{pid}/task") or () if n.isdigit()]
        for tid in sorted(tids):
            text = host.read_file(f"/proc/{pid}/task/{tid}/comm")
            name = None if text is None else text.rstrip("\n")
            if name is not None and matcher.matches(name):
                out.append((pid, tid, name))
    return out
