"""The cleaner: the only writer in the hygiene package.

`plan_clean` is pure: it turns facts into a list of actions, each with its reason, so a dry
run prints exactly what `--yes` would do. `execute` does those actions and nothing else:
every action is journaled before it is taken, every process is re-identified (pid and
start time, through a pidfd) before it is signalled, every segment is re-read and re-judged
by the leak rule at the moment of removal, and every /dev/shm file is looked at again (same
inode, unchanged, held by nobody) just before its unlink.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from accelhost.host.live import LiveHost
from accelhost.hygiene.actions import (
    Action,
    CleanFilters,
    CleanResult,
    Outcome,
    ProcessRef,
    RemoveSegment,
    RemoveShmFile,
    StopProcesses,
)
from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.journal import DEFAULT_JOURNAL, Journal
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.posix_check import judge_shm_files, shm_known
from accelhost.hygiene.rules import find_orphans, judge_segment, leaked_segments, protected_pids
from accelhost.hygiene.stopper import stop_all
from accelhost.hygiene.text import one_line
from accelhost.posixshm import path_is_held, stat_shm_file
from accelhost.procs import ProcessInfo, descendants, read_process
from accelhost.shm import read_segments, remove_segment
from accelhost.supervisor.options import DEFAULT_GRACE_S

__all__ = [
    "DEFAULT_GRACE_S",
    "DEFAULT_JOURNAL",
    "Action",
    "CleanFilters",
    "CleanResult",
    "Journal",
    "RemoveSegment",
    "RemoveShmFile",
    "StopProcesses",
    "execute",
    "figures",
    "plan_clean",
]


def _ref(p: ProcessInfo) -> ProcessRef:
    return ProcessRef(p.pid, p.start_ticks, p.state, p.command)


def plan_clean(
    facts: HostFacts, options: HygieneOptions, filters: CleanFilters | None = None
) -> list[Action]:
    """Pure: the actions that would make this host clean, stops first, then segments."""
    f = filters or CleanFilters()
    actions: list[Action] = []
    procs: Mapping[int, ProcessInfo] = facts.processes or {}
    stopping: set[int] = set()
    if f.orphans and facts.processes is not None:
        protected = protected_pids(procs, facts.self_pid)
        orphans = [
            o
            for o in find_orphans(procs, facts.self_pid, options)
            if not f.pids or o.proc.pid in f.pids
        ]
        by_group: dict[int, list[Any]] = {}
        for o in orphans:
            by_group.setdefault(o.proc.pgid, []).append(o)
        for pgid, members in sorted(by_group.items()):
            pids: list[int] = []
            for o in members:
                for pid in [o.proc.pid, *descendants(procs, o.proc.pid)]:
                    if pid not in pids and pid not in protected and pid not in stopping:
                        pids.append(pid)
            if not pids:
                continue
            stopping.update(pids)
            # The group is signalled too (it catches what forks meanwhile) only when every
            # live member is a target: a healthy server started by the same script shares
            # the group of the orphans its neighbour left (`nohup ... &` twice).
            live = {p for p, i in procs.items() if i.pgid == pgid and not i.is_zombie}
            whole = pgid > 1 and live <= set(pids)
            # the reason of the topmost orphan: its descendants share its story
            tops = [o for o in members if o.top is o.proc] or members
            reasons = "; ".join(dict.fromkeys(o.reason for o in tops))
            first = tops[0].proc
            actions.append(
                StopProcesses(
                    pgid=pgid,
                    signal_group=whole,
                    targets=tuple(_ref(procs[p]) for p in pids if p in procs),
                    reason=f"{reasons} ({one_line(first.command)})",
                )
            )
    if f.segments and facts.segments is not None and facts.processes is not None:
        for seg in facts.segments:
            if f.shmids and seg.shmid not in f.shmids:
                continue
            if f.owners and seg.uid not in f.owners:
                continue
            if f.keys and (seg.key & 0xFFFFFFFF) not in f.keys:
                continue
            verdict = judge_segment(seg, facts.alive, facts.now_epoch, options.shm_min_age_s)
            after = False
            if not verdict.leaked and (seg.cpid in stopping or seg.lpid in stopping):
                after = not seg.marked_for_destruction
                owner = seg.cpid if seg.cpid in stopping else seg.lpid
                reason = f"created or last used by pid {owner}, which this plan stops"
            else:
                reason = verdict.reason
            if verdict.leaked or after:
                actions.append(
                    RemoveSegment(
                        shmid=seg.shmid,
                        key=seg.key_hex,
                        size=seg.size,
                        cpid=seg.cpid,
                        lpid=seg.lpid,
                        ctime=seg.ctime,
                        reason=reason,
                        after_stop=after,
                    )
                )
    if f.shm_files:
        for j in judge_shm_files(facts, options):
            if not j.leaked or (f.paths and j.file.path not in f.paths):
                continue
            if f.owners and j.file.uid not in f.owners:
                continue
            actions.append(
                RemoveShmFile(
                    path=j.file.path,
                    used_bytes=j.file.used_bytes,
                    size_bytes=j.file.size_bytes,
                    owner=j.file.owner,
                    uid=j.file.uid,
                    dev=j.file.dev,
                    inode=j.file.inode,
                    mtime=j.file.mtime,
                    naming=j.naming,
                    reason=j.reason,
                )
            )
    return actions


def _alive_now(pid: int) -> bool:
    info = read_process(LiveHost(), pid)
    return info is not None and not info.is_zombie


def _remove_segments(
    removes: list[RemoveSegment],
    options: HygieneOptions,
    journal: Journal,
    result: CleanResult,
    say: Callable[[str], None],
    remover: Callable[[int], None],
) -> None:
    host = LiveHost()
    for act in removes:
        target = f"shmid {act.shmid}"
        segs = read_segments(host) or []
        now_seg = next((s for s in segs if s.shmid == act.shmid), None)
        if now_seg is None:
            result.outcomes.append(Outcome("remove_segment", target, "already gone", True))
            continue
        if now_seg.key_hex != act.key or now_seg.cpid != act.cpid or now_seg.ctime != act.ctime:
            result.outcomes.append(
                Outcome("remove_segment", target, "shmid now names another segment: skipped", True)
            )
            continue
        now = time.time()
        verdict = judge_segment(
            now_seg, _alive_now, now, options.shm_min_age_s, exempt_age=act.after_stop
        )
        if not verdict.leaked:
            result.outcomes.append(
                Outcome("remove_segment", target, f"kept: {verdict.reason}", True)
            )
            say(f"  kept {target}: {verdict.reason}")
            continue
        journal.write(
            "intent",
            action="remove_segment",
            shmid=act.shmid,
            key=act.key,
            bytes=now_seg.size,
            creator_pid=now_seg.cpid,
            reason=verdict.reason,
        )
        try:
            remover(act.shmid)
        except OSError as exc:
            outcome = Outcome("remove_segment", target, f"failed: {exc}", False)
        else:
            outcome = Outcome("remove_segment", target, "removed", True)
        journal.write("outcome", action="remove_segment", shmid=act.shmid, result=outcome.result)
        say(f"  {target}: {outcome.result}")
        result.outcomes.append(outcome)


def _recheck_shm_file(act: RemoveShmFile, min_age_s: float) -> str | None:
    """None when the file may go now; else why it stays (the plan is minutes old, maybe)."""
    fresh = stat_shm_file(act.path)
    if fresh is None:
        return "already gone"
    if (fresh.dev, fresh.inode) != (act.dev, act.inode):
        return "kept: the name now belongs to another file"
    if abs(fresh.mtime - act.mtime) > 0.001:  # listings round mtimes
        return "kept: changed since it was judged"
    if time.time() - fresh.mtime < min_age_s:
        return f"kept: changed under {min_age_s:g} s ago"
    held = path_is_held(LiveHost(), act.path)
    if held is None:
        return "kept: some process's open files cannot be read"
    if held:
        return "kept: a live process holds it open or mapped"
    return None


def _remove_shm_files(
    removes: list[RemoveShmFile],
    options: HygieneOptions,
    journal: Journal,
    result: CleanResult,
    say: Callable[[str], None],
) -> None:
    for act in removes:
        why = _recheck_shm_file(act, options.shm_min_age_s)
        if why is not None:
            result.outcomes.append(Outcome("remove_shm_file", act.path, why, True))
            say(f"  {act.path}: {why}")
            continue
        journal.write(
            "intent",
            action="remove_shm_file",
            path=act.path,
            used_bytes=act.used_bytes,
            owner=act.owner,
            naming=act.naming,
            reason=act.reason,
        )
        try:
            os.unlink(act.path)
        except FileNotFoundError:
            outcome = Outcome("remove_shm_file", act.path, "already gone", True)
        except OSError as exc:
            outcome = Outcome("remove_shm_file", act.path, f"failed: {exc.strerror}", False)
        else:
            outcome = Outcome("remove_shm_file", act.path, "removed", True)
        journal.write("outcome", action="remove_shm_file", path=act.path, result=outcome.result)
        say(f"  {act.path}: {outcome.result}")
        result.outcomes.append(outcome)


def execute(
    actions: list[Action],
    options: HygieneOptions,
    journal: Journal,
    grace_s: float = DEFAULT_GRACE_S,
    say: Callable[[str], None] = lambda _line: None,
    sleep: Callable[[float], None] = time.sleep,
    remover: Callable[[int], None] = remove_segment,
) -> CleanResult:
    """Do the planned actions on this machine (stops first, so segments can then go)."""
    result = CleanResult()
    stops = [a for a in actions if isinstance(a, StopProcesses)]
    removes = [a for a in actions if isinstance(a, RemoveSegment)]
    files = [a for a in actions if isinstance(a, RemoveShmFile)]
    if stops:
        stop_all(stops, grace_s, journal, result, say, sleep)
    if removes:
        _remove_segments(removes, options, journal, result, say, remover)
    if files:
        _remove_shm_files(files, options, journal, result, say)
    return result


def figures(facts: HostFacts, options: HygieneOptions) -> dict[str, Any]:
    """The before/after numbers a person wants to see move; None where a source could not
    be read (an unread segment table is not an empty one)."""
    segs = facts.segments
    shm = [j for j in judge_shm_files(facts, options) if j.leaked] if shm_known(facts) else None
    leaks = (
        len(leaked_segments(segs, facts.alive, facts.now_epoch, options.shm_min_age_s))
        if segs is not None and facts.processes is not None
        else None
    )
    return {
        "hugepages_free": None
        if facts.hugepage_pools is None
        else {
            p.size_label: {"free": p.free, "total": p.total}
            for p in facts.hugepage_pools
            if p.node is None
        },
        "segments": None if segs is None else len(segs),
        "segment_bytes": None if segs is None else sum(s.size for s in segs),
        "leaked_segments": leaks,
        "orphans": None
        if facts.processes is None
        else len(find_orphans(facts.processes, facts.self_pid, options)),
        "device_memory_free_mib": {d.label: d.free_mib for d in facts.devices},
        "leaked_shm_files": None if shm is None else len(shm),
        "leaked_shm_bytes": None if shm is None else sum(j.file.used_bytes for j in shm),
    }
