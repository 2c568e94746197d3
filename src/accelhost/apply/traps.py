"""Checks run before binding: the traps users keep falling into, each as one warning."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence

from accelhost.apply.irq import rooted
from accelhost.cpulist import format_cpulist, parse_cpulist
from accelhost.errors import ParseError
from accelhost.host.base import Host
from accelhost.host.live import live_host
from accelhost.readers.cpus import read_allowed_cpus, read_cgroup_cpuset

OMP_VARS = ("OMP_PROC_BIND", "GOMP_CPU_AFFINITY")


def process_environ(pid: int | str, host: Host | None = None) -> dict[str, str] | None:
    """The environment a process started with; None when it cannot be read."""
    text = (host or live_host()).read_file(f"/proc/{pid}/environ")
    if text is None:
        return None
    return dict(item.split("=", 1) for item in text.split("\0") if "=" in item)


def _cpuset(pid: int | str, host: Host) -> tuple[int, ...] | None:
    """The cgroup cpuset of `pid`; None when absent or unreadable (these warnings are
    advice: a list that does not parse costs the advice, not the bind)."""
    with contextlib.suppress(ParseError):
        found = read_cgroup_cpuset(host, pid)
        return None if found is None else found[0]
    return None


def omp_warnings(env: Mapping[str, str] | None, who: str) -> list[str]:
    found = [f"{name}={env[name]}" for name in OMP_VARS if env is not None and name in env]
    if not found:
        return []
    return [
        f"{who} has {' and '.join(found)} set: libgomp pins the process (to CPU 0 with "
        "OMP_PROC_BIND=TRUE) and shrinks its allowed CPUs; unset it for the engine, "
        "or bind after libgomp has started"
    ]


def narrowed_warning(pid: int | str, host: Host | None = None) -> list[str]:
    """A planner reading this process's allowed CPUs sees less than the cgroup grants."""
    host = host or live_host()
    try:
        allowed = read_allowed_cpus(host, pid)
    except ParseError:
        return []
    cpuset = _cpuset(pid, host)
    if allowed is None or cpuset is None or not set(allowed) < set(cpuset):
        return []
    who = "this process" if pid == "self" else f"process {pid}"
    return [
        f"{who} may run on CPUs {format_cpulist(allowed)} only, narrower than its "
        f"cgroup cpuset {format_cpulist(cpuset)}: something pinned it earlier (taskset, "
        "OMP_PROC_BIND, a launcher), so a plan made from its allowed CPUs is smaller than "
        "the container's"
    ]


def outside_cpuset_warning(pid: int, planned: Sequence[int], host: Host | None = None) -> list[str]:
    """Planned CPUs that the kernel will silently drop or refuse for this process."""
    cpuset = _cpuset(pid, host or live_host())
    outside = sorted(set(planned) - set(cpuset)) if cpuset is not None else []
    if not outside:
        return []
    return [
        f"CPUs {format_cpulist(outside)} of the plan are outside the cgroup cpuset "
        f"{format_cpulist(cpuset or [])} of process {pid}: the kernel will refuse them"
    ]


def irq_writable_warning(root: str) -> list[str]:
    if os.access(rooted(root, "/proc/irq"), os.W_OK):
        return []
    return [
        "/proc/irq is not writable. If running in Docker, start the container with "
        "'--privileged=true'."
    ]


def in_container(host: Host | None = None) -> bool:
    host = host or live_host()
    # Docker and Podman leave a marker file (empty, so read as "", not None).
    if any(host.read_file(p) is not None for p in ("/.dockerenv", "/run/.containerenv")):
        return True
    text = host.read_file("/proc/1/cgroup") or ""
    return any(word in text for word in ("docker", "kubepods", "containerd", "libpod"))


def host_threads_warning(found: int, pattern: str, host: Host | None = None) -> list[str]:
    if found:
        return []
    docker = " In Docker these host threads are only visible with '--pid=host'."
    hint = docker if in_container(host) else ""
    return [f"no '{pattern}' threads found on this host; nothing to pin for them.{hint}"]


# -- clobbered affinity: what the process's threads show before (or after) binding -------

# Variables with which an OpenMP runtime pins threads itself (libgomp, LLVM/Intel OpenMP).
OMP_PIN_VARS = ("OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY", "KMP_AFFINITY")
_FALSE = ("false", "0", "")


def thread_affinities(pid: int, host: Host | None = None) -> dict[int, frozenset[int]]:
    """Each live thread's CPUs, by sched_getaffinity(2): the mask the kernel enforces."""
    names = (host or live_host()).list_dir(f"/proc/{pid}/task") or ()
    out = {}
    for tid in [int(t) for t in names if t.isdigit()]:
        with contextlib.suppress(OSError):  # exited meanwhile
            out[tid] = frozenset(os.sched_getaffinity(tid))
    return out


def clobber_warnings(pid: int, planned: Sequence[int], host: Host) -> list[str]:
    """Known pathological narrowings of `pid`'s threads, each with what to do about it.
    Cheap in the common case: with several CPUs on the main thread and no OpenMP pinning
    variable, neither pattern can hold, and the other threads are not read."""
    env = process_environ(pid, host)
    try:
        main = os.sched_getaffinity(pid)
    except OSError:
        return []
    if len(main) > 1 and not any(k in (env or {}) for k in OMP_PIN_VARS):
        return []
    cpuset = _cpuset(pid, host) or online_cpus(host)
    return classify_clobber(pid, thread_affinities(pid, host), cpuset, env, planned)


def classify_clobber(
    pid: int,
    affinities: Mapping[int, frozenset[int]],
    cpuset: Sequence[int] | None,
    env: Mapping[str, str] | None,
    planned: Sequence[int] = (),
) -> list[str]:
    """Pure: the warnings for these thread affinities. CPUs the plan itself asks for
    (`planned`) are never pathological: after a bind to one CPU, every thread is on it."""
    if not affinities:
        return []
    allowed = set(cpuset or ())
    plan_cpus = set(planned)
    env = env or {}
    omp = {
        k: env[k]
        for k in OMP_PIN_VARS
        if k in env and not (k == "OMP_PROC_BIND" and env[k].strip().lower() in _FALSE)
    }
    omp_text = " ".join(f"{k}={v}" for k, v in omp.items())
    sets = set(affinities.values())
    if len(sets) == 1:
        (only,) = sets
        if len(only) == 1 and len(allowed) > 1 and not only <= plan_cpus:
            (cpu,) = only
            head = (
                f"every thread of process {pid} ({len(affinities)}) runs on CPU {cpu} only, of "
                f"the {len(allowed)} CPUs its cgroup allows ({format_cpulist(sorted(allowed))})"
            )
            return [f"{head}: {_why_one_cpu(omp, omp_text)}"]
        return []
    singles = {tid: s for tid, s in affinities.items() if len(s) == 1}
    pinned = frozenset().union(*singles.values()) if singles else frozenset()
    if omp and len(pinned) > 1 and 2 * len(singles) >= len(affinities) and not pinned <= plan_cpus:
        return [
            f"{len(singles)} of the {len(affinities)} threads of process {pid} are each pinned "
            f"to one CPU ({format_cpulist(sorted(pinned))}) by the OpenMP runtime ({omp_text}): "
            "binding moves the threads that exist, but the runtime pins the threads it starts "
            "later again. Turn the engine's own pinning off when accelhost binds (vLLM's CPU "
            "backend: VLLM_CPU_OMP_THREADS_BIND=nobind; else unset "
            f"{', '.join(omp)})"
        ]
    return []


def _why_one_cpu(omp: Mapping[str, str], omp_text: str) -> str:
    if "OMP_PROC_BIND" in omp:  # set, and not to false
        return (
            f"OMP_PROC_BIND={omp['OMP_PROC_BIND']} is set, and torch's bundled libgomp "
            "pins the whole process to CPU 0 with it before any binding (vllm-ascend #11307). "
            "Unset OMP_PROC_BIND (or set OMP_PROC_BIND=false) in the engine's environment and "
            "restart it; binding now fixes the threads that exist, but OpenMP threads started "
            "later follow OMP_PROC_BIND again"
        )
    if omp_text:
        return (
            f"the OpenMP runtime pinned it ({omp_text}). Unset these in the engine's "
            "environment (vLLM's CPU backend: VLLM_CPU_OMP_THREADS_BIND=nobind) and restart it"
        )
    return (
        "something pinned it before binding (taskset, numactl, a launcher's CPU "
        "binding). Check the engine's start command; a plan made from this process's allowed "
        "CPUs would see one CPU"
    )


def online_cpus(host: Host | None = None) -> tuple[int, ...] | None:
    """The CPUs online now (/sys/devices/system/cpu/online), sorted; None when unknown."""
    path = "/sys/devices/system/cpu/online"
    text = (host or live_host()).read_file(path)
    with contextlib.suppress(ParseError):
        if text is not None and text.strip():
            return tuple(sorted(set(parse_cpulist(text, path))))
    return None
