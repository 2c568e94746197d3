"""Checks run before binding: the traps users keep falling into, each as one warning."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from accelhost.cpulist import format_cpulist, parse_cpulist
from accelhost.errors import ParseError
from accelhost.parsers.sysfs import cgroup_cpuset_candidates

OMP_VARS = ("OMP_PROC_BIND", "GOMP_CPU_AFFINITY")


def _read(path: str) -> str | None:
    """The whole file, or None. Plain os calls: half the cost of a buffered file object,
    and every bind reads three or four of these."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def process_environ(pid: int) -> dict[str, str] | None:
    """The environment a process started with; None when it cannot be read."""
    text = _read(f"/proc/{pid}/environ")
    if text is None:
        return None
    out = {}
    for item in text.split("\0"):
        key, sep, value = item.partition("=")
        if sep:
            out[key] = value
    return out


def allowed_cpus(pid: int) -> list[int] | None:
    text = _read(f"/proc/{pid}/status")
    if text is None:
        return None
    for line in text.splitlines():
        if line.startswith("Cpus_allowed_list:"):
            try:
                return sorted(set(parse_cpulist(line.split(":", 1)[1])))
            except ParseError:
                return None
    return None


def cgroup_cpuset(pid: int) -> list[int] | None:
    """The CPUs the process's cgroup grants (cgroup v2 or v1); None when not found."""
    text = _read(f"/proc/{pid}/cgroup")
    if text is None:
        return None
    candidates = cgroup_cpuset_candidates(text)
    for candidate in candidates:
        value = _read(candidate)
        if value is not None and value.strip():
            try:
                return sorted(set(parse_cpulist(value)))
            except ParseError:
                continue
    return None


def omp_warnings(env: Mapping[str, str] | None, who: str) -> list[str]:
    if env is None:
        return []
    found = [f"{name}={env[name]}" for name in OMP_VARS if name in env]
    if not found:
        return []
    return [
        f"{who} has {' and '.join(found)} set: libgomp pins the process (to CPU 0 with "
        "OMP_PROC_BIND=TRUE) and shrinks its allowed CPUs; unset it for the engine, "
        "or bind after libgomp has started"
    ]


def narrowed_warning(pid: int) -> list[str]:
    """A planner reading this process's allowed CPUs sees less than the cgroup grants."""
    allowed = allowed_cpus(pid)
    cpuset = cgroup_cpuset(pid)
    if allowed is None or cpuset is None or not set(allowed) < set(cpuset):
        return []
    return [
        f"process {pid} may run on CPUs {format_cpulist(allowed)} only, narrower than its "
        f"cgroup cpuset {format_cpulist(cpuset)}: something pinned it earlier (taskset, "
        "OMP_PROC_BIND, a launcher), so a plan made from its allowed CPUs is smaller than "
        "the container's"
    ]


def outside_cpuset_warning(pid: int, planned: Sequence[int]) -> list[str]:
    """Planned CPUs that the kernel will silently drop or refuse for this process."""
    cpuset = cgroup_cpuset(pid)
    outside = sorted(set(planned) - set(cpuset)) if cpuset is not None else []
    if not outside:
        return []
    return [
        f"CPUs {format_cpulist(outside)} of the plan are outside the cgroup cpuset "
        f"{format_cpulist(cpuset or [])} of process {pid}: the kernel will refuse them"
    ]


def irq_writable_warning(writable: bool) -> list[str]:
    if writable:
        return []
    return [
        "/proc/irq is not writable. If running in Docker, start the container with "
        "'--privileged=true'."
    ]


def in_container() -> bool:
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    text = _read("/proc/1/cgroup") or ""
    return any(word in text for word in ("docker", "kubepods", "containerd", "libpod"))


def host_threads_warning(found: int, pattern: str) -> list[str]:
    if found:
        return []
    hint = (
        " In Docker these host threads are only visible with '--pid=host'."
        if in_container()
        else ""
    )
    return [f"no '{pattern}' threads found on this host; nothing to pin for them.{hint}"]
