"""The two rules that decide what may be removed: orphan engines and leaked segments.

Both the doctor (to report) and the cleaner (to act, and to re-check at the moment of
acting) use these functions, so "what the doctor calls leaked" and "what clean removes"
cannot drift apart.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from accelhost.hygiene.options import CHILD_ENGINE_TITLE, SHELLS_AND_INITS, HygieneOptions
from accelhost.parsers.sysvipc import SHM_HUGETLB, ShmSegment
from accelhost.procs import ProcessInfo, ancestors


@dataclass(frozen=True)
class Orphan:
    proc: ProcessInfo
    reason: str
    # True when the whole process group lost its leader: the group may then be signalled.
    group_orphaned: bool


def protected_pids(processes: Mapping[int, ProcessInfo], self_pid: int | None) -> set[int]:
    """PID 0, PID 1, the caller and its ancestors: never reported, never signalled."""
    out = {0, 1}
    if self_pid is not None:
        out.add(self_pid)
        out.update(ancestors(processes, self_pid))
    return out


def pid1_is_engine(processes: Mapping[int, ProcessInfo], regex: re.Pattern[str]) -> bool:
    """PID 1 is itself an engine's API server (`vllm serve` as a container's PID 1).

    Its EngineCore then has PPID 1 from birth: not re-parented, its launcher lives. A shell
    or an init (bash -lc "vllm serve ...", tini, accelhost run) as PID 1 is not the engine,
    even though its command line names one: a child engine under it has lost its launcher.
    """
    init = processes.get(1)
    if init is None or init.is_zombie or not init.cmdline:
        return False
    names = {init.comm} | {arg.rsplit("/", 1)[-1] for arg in init.cmdline[:3]}
    if names & SHELLS_AND_INITS or CHILD_ENGINE_TITLE.search(init.command):
        return False
    return bool(regex.search(init.command))


def find_orphans(
    processes: Mapping[int, ProcessInfo], self_pid: int | None, options: HygieneOptions
) -> list[Orphan]:
    """Engine processes whose launcher is gone.

    An engine (cmdline matches a pattern: `comm` is cut at 15 characters) is an orphan when
    its process group leader has exited (the launcher, or the container's shell, is gone),
    or when it is one of vLLM's child processes re-parented to PID 1 (its API server is
    gone), unless PID 1 is that API server (a container running `vllm serve` as PID 1). A
    group id of 0 means the leader lives in another PID namespace: unknowable.
    """
    regex = options.engine_regex()
    if regex is None:
        return []
    protected = protected_pids(processes, self_pid)
    # An engine PID 1 is the launcher only of what it started: its own session (a second
    # server started with `docker exec` has a session of its own).
    init = processes.get(1)
    init_session = init.sid if init is not None and pid1_is_engine(processes, regex) else None
    out = []
    for pid in sorted(processes):
        proc = processes[pid]
        if pid in protected or proc.is_kernel_thread or proc.is_zombie or not proc.cmdline:
            continue
        if not regex.search(proc.command):
            continue
        leader = processes.get(proc.pgid)
        if proc.pgid not in (0, pid) and (leader is None or leader.is_zombie):
            why = "has exited" if leader is None else "is a zombie"
            out.append(Orphan(proc, f"its process group leader {proc.pgid} {why}", True))
        elif (
            proc.ppid == 1 and CHILD_ENGINE_TITLE.search(proc.command) and proc.sid != init_session
        ):
            out.append(Orphan(proc, "a vLLM child process re-parented to PID 1", False))
    return out


@dataclass(frozen=True)
class LeakVerdict:
    leaked: bool
    reason: str


def segment_idle_s(seg: ShmSegment, now_epoch: float | None) -> float | None:
    """Seconds since the segment was created, attached or detached, whichever is latest."""
    if now_epoch is None:
        return None
    last = max(seg.ctime, seg.atime, seg.dtime)
    return max(0.0, now_epoch - last)


def is_hugetlb(seg: ShmSegment) -> bool:
    return bool(seg.perms & SHM_HUGETLB)


def judge_segment(
    seg: ShmSegment,
    alive: Callable[[int], bool],
    now_epoch: float | None,
    min_age_s: float,
    exempt_age: bool = False,
) -> LeakVerdict:
    """The leak rule: unattached, not marked, creator and last user dead, idle long enough.

    A pid of 0 is "not visible from this PID namespace", never "dead": a segment whose
    creator cannot be seen is not ours to judge.
    """
    if seg.marked_for_destruction:
        return LeakVerdict(False, "already marked for destruction")
    if seg.nattch > 0:
        return LeakVerdict(False, f"attached by {seg.nattch} process(es)")
    if seg.cpid <= 0:
        return LeakVerdict(False, "creator not visible from this PID namespace")
    if alive(seg.cpid):
        return LeakVerdict(False, f"creator {seg.cpid} is alive")
    if seg.lpid > 0 and alive(seg.lpid):
        return LeakVerdict(False, f"last user {seg.lpid} is alive")
    idle = segment_idle_s(seg, now_epoch)
    if not exempt_age:
        if idle is None:
            return LeakVerdict(False, "age unknown (no clock in the recording)")
        if idle < min_age_s:
            return LeakVerdict(False, f"idle {idle:.0f} s, under the {min_age_s:g} s grace")
    users = f"creator {seg.cpid}" + (
        f" and last user {seg.lpid}" if seg.lpid > 0 and seg.lpid != seg.cpid else ""
    )
    idle_text = f", idle {idle:.0f} s" if idle is not None else ""
    return LeakVerdict(True, f"unattached, {users} gone{idle_text}")


def leaked_segments(
    segments: tuple[ShmSegment, ...],
    alive: Callable[[int], bool],
    now_epoch: float | None,
    min_age_s: float,
) -> list[tuple[ShmSegment, LeakVerdict]]:
    out = []
    for seg in segments:
        verdict = judge_segment(seg, alive, now_epoch, min_age_s)
        if verdict.leaked:
            out.append((seg, verdict))
    return out
