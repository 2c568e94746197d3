"""The cleaner: what `clean` plans, and the order in which it has `accelhost.remove` do it.

`plan_clean` is pure: it turns facts into a list of actions, each with its reason, so a dry
run prints exactly what `--yes` would do. `execute` does those actions and nothing else,
through `accelhost.remove` (the hygiene package changes nothing itself): every action is
journaled before it is taken, every process is re-identified (pid and start time, through
a pidfd) before it is signalled, every segment is re-read and re-judged by the leak rule
at the moment of removal, and every /dev/shm file is looked at again (same inode,
unchanged, held by nobody) just before its unlink.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from accelhost import formats
from accelhost.formats import mib_bytes
from accelhost.host.base import Host
from accelhost.host.live import live_host
from accelhost.hygiene.clean.actions import (
    Action,
    CleanFilters,
    CleanResult,
    Outcome,
    ProcessRef,
    RemoveSegment,
    RemoveShmFile,
    StopProcesses,
    Unmatched,
    unmatched_targets,
)
from accelhost.hygiene.clean.journal import Journal
from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.judge.attribution import LeftBy
from accelhost.hygiene.judge.containers import whose_action
from accelhost.hygiene.judge.findings import Findings, find
from accelhost.hygiene.judge.rules import judge_segment, protected_pids
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import one_line
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.procs import ProcessInfo, descendants, read_process
from accelhost.readers.shmfiles import ShmFile
from accelhost.remove import DEFAULT_GRACE_S
from accelhost.remove.shm import Removal, remove_segment, unlink_shm_file
from accelhost.remove.signals import (
    D_STATE,
    Pinned,
    StopLoop,
    send_each,
    signal_name,
    signal_pinned_group,
)

__all__ = ["CleanFilters", "Journal"]  # for the CLI, beside this module's own


def _ref(p: ProcessInfo) -> ProcessRef:
    return ProcessRef(p.pid, p.start_ticks, p.state, p.command)


def plan_clean(
    facts: HostFacts,
    options: HygieneOptions,
    filters: CleanFilters | None = None,
    found: Findings | None = None,
) -> list[Action]:
    """Pure: the actions that would make this host clean, stops first, then segments, of
    what the rules found (`found`: `find(facts, options)` when the caller has not)."""
    f = filters or CleanFilters()
    found = found or find(facts, options)
    actions: list[Action] = []
    procs: Mapping[int, ProcessInfo] = facts.processes or {}
    stopping: set[int] = set()
    if f.orphans and found.orphans is not None:
        protected = protected_pids(procs, facts.self_pid)
        by_group: dict[int, list[Any]] = {}
        for o in found.orphans:
            if not f.pids or o.proc.pid in f.pids:
                by_group.setdefault(o.proc.pgid, []).append(o)
        for pgid, members in sorted(by_group.items()):
            family = (p for o in members for p in [o.proc.pid, *descendants(procs, o.proc.pid)])
            pids = [p for p in dict.fromkeys(family) if p not in protected and p not in stopping]
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
            reason = f"{reasons} ({one_line(tops[0].proc.command)})"
            targets = tuple(_ref(procs[p]) for p in pids if p in procs)
            actions.append(StopProcesses(pgid, signal_group=whole, targets=targets, reason=reason))
    if f.segments:
        for seg, verdict in found.segments or ():
            if not f.takes_segment(seg):
                continue
            owner = next((p for p in (seg.cpid, seg.lpid) if p in stopping), None)
            if verdict.leaked:
                actions.append(RemoveSegment(seg, verdict.reason))
            elif owner is not None and not seg.marked_for_destruction:
                why = f"created or last used by pid {owner}, which this plan stops"
                actions.append(RemoveSegment(seg, why, after_stop=True))
    if f.shm_files:
        leaked = [j for j in found.shm or () if j.leaked and f.takes_file(j.file)]
        actions += [RemoveShmFile(j.file, j.naming, j.reason) for j in leaked]
    return actions


@dataclass(frozen=True)
class CleanPlan:
    """What `clean` shows and, with --yes, does: the actions (of the `--container` scope)
    and whose each is, the named targets it leaves alone and why, how many leftovers the
    scope kept out as not surely its own, and the figures before."""

    actions: list[Action]
    whose: list[LeftBy | None]
    unmatched: list[Unmatched]
    doubtful: int
    before: dict[str, Any]

    def to_dict(self, dry_run: bool) -> dict[str, Any]:
        return {
            "format": formats.CLEAN,
            "dry_run": dry_run,
            "actions": [
                {**a.to_dict(), "container": w and w.to_dict()}
                for a, w in zip(self.actions, self.whose, strict=True)
            ],
            "not_acted_on": [u.to_dict() for u in self.unmatched],
            "before": self.before,
        }

    def lines(self, grace_s: float) -> list[str]:
        out = []
        stop = f"     SIGTERM, wait up to {grace_s:g} s, SIGKILL what is left, wait again"
        for n, (a, who) in enumerate(zip(self.actions, self.whose, strict=True), 1):
            out.append(f"  {n}. {a.describe()}")
            if who is not None:
                out.append(f"     container: {who.why}")
            if a.kind == "stop":
                out.append(stop)
        return out


def make_plan(facts: HostFacts, options: HygieneOptions, filters: CleanFilters) -> CleanPlan:
    """`plan_clean` of `facts` judged once, scoped to `options.container` (a UsageError
    when it names none)."""
    found = find(facts, options)
    att = found.attribution
    actions = plan_clean(facts, options, filters, found)
    whose = [whose_action(att, a) for a in actions]
    doubtful = 0  # what the scope may have left, but not for sure alone: never in it
    if options.container is not None:
        ids = {c.id for c in att.resolve(options.container)}
        doubtful = sum(1 for w in whose if w and w.names(ids) and not w.only(ids))
        kept = [(a, w) for a, w in zip(actions, whose, strict=True) if w and w.only(ids)]
        actions, whose = [a for a, _ in kept], [w for _, w in kept]
    unmatched = unmatched_targets(found, options, filters, actions)
    return CleanPlan(actions, whose, unmatched, doubtful, figures(found))


def _alive_now(pid: int) -> bool:
    info = read_process(live_host(), pid, cmdline=False)
    return info is not None and not info.is_zombie


def _remove(
    host: Host, act: RemoveSegment | RemoveShmFile, min_age_s: float, journal: Journal
) -> Removal:
    """One removal, re-checked by `accelhost.remove`; its intent journaled (and synced)
    just before the system call, its outcome right after."""

    def intent(now: Any, why: str) -> None:
        journal.write("intent", action=act.kind, **act.intent(now, why))

    if isinstance(act, RemoveSegment):

        def segment_rule(seg: ShmSegment) -> tuple[bool, str]:
            """The plan's segment, judged again by the leak rule on the table read now."""
            if (seg.key, seg.cpid, seg.ctime) != (act.seg.key, act.seg.cpid, act.seg.ctime):
                return False, "shmid now names another segment"
            verdict = judge_segment(seg, _alive_now, time.time(), min_age_s, act.after_stop)
            return verdict.leaked, verdict.reason

        removal = remove_segment(host, act.shmid, segment_rule, intent)
        ident: dict[str, Any] = {"shmid": act.shmid}
    else:

        def file_rule(fresh: ShmFile) -> tuple[bool, str]:
            """The plan's file, unchanged since it was judged (the plan is minutes old)."""
            if abs(fresh.mtime - act.file.mtime) > 0.001:  # listings round mtimes
                return False, "changed since it was judged"
            if time.time() - fresh.mtime < min_age_s:
                return False, f"changed under {min_age_s:g} s ago"
            return True, act.reason

        removal = unlink_shm_file(host, act.path, act.file.dev, act.file.inode, file_rule, intent)
        ident = {"path": act.path}
    if removal.tried:
        journal.write("outcome", action=act.kind, **ident, result=removal.result)
    return removal


def _stop_all(
    stops: list[StopProcesses], grace_s: float, journal: Journal, say: Callable[[str], None]
) -> list[Outcome]:
    """`accelhost.remove.signals`' stop loop, each signal journaled before it is sent (and a group
    signalled while a pinned member is still in it)."""
    host = live_host()
    refs = {t.pid: t for act in stops for t in act.targets}

    def targets() -> dict[int, ProcessInfo]:
        now = {pid: read_process(host, pid, cmdline=False) for pid in refs}
        return {
            pid: info
            for pid, info in now.items()
            if info and not info.is_zombie and info.start_ticks == refs[pid].start_ticks
        }

    def send(sig: int, pins: list[Pinned]) -> list[int]:
        name = signal_name(sig)
        sent: list[int] = []
        for act in stops:
            live = [p for p in pins if p.pid in {t.pid for t in act.targets}]
            if not live:
                continue
            journal.write(
                "intent",
                action="signal",
                signal=name,
                pgid=act.pgid if act.signal_group else None,
                pids=[p.pid for p in live],
                cmdlines=[one_line(refs[p.pid].cmdline, 300) for p in live],
                reason=act.reason,
            )
            if act.signal_group:
                err = signal_pinned_group(act.pgid, live, sig)
                if isinstance(err, PermissionError):
                    say(f"  killpg({act.pgid}, {name}): {err.strerror}")
            sent += send_each(sig, live)
            for p in live:
                if p.denied:
                    say(f"  pid {p.pid}: {p.denied}")
            group = f"group {act.pgid}, " if act.signal_group else ""
            say(f"  {name} -> {group}pids {' '.join(str(p.pid) for p in live)}")
        return sent

    loop = StopLoop(host, targets, send)
    left = loop.run(grace_s, grace_s)
    outcomes = []
    for pid in refs:
        pin = loop.members.get(pid)
        if pid not in left:
            why = "gone"
        elif pin is not None and pin.denied:
            why = pin.denied
        else:
            why = D_STATE if left[pid].state == "D" else "still alive after SIGKILL"
        journal.write("outcome", action="stop", pid=pid, result=why)
        outcomes.append(Outcome("stop", f"pid {pid}", why, pid not in left))
    return outcomes


def execute(
    actions: list[Action],
    options: HygieneOptions,
    journal: Journal,
    grace_s: float = DEFAULT_GRACE_S,
    say: Callable[[str], None] = lambda _line: None,
) -> CleanResult:
    """Do the planned actions on this machine: stops first, so that segments can then go,
    then segments and files in the plan's order."""
    stops = [a for a in actions if isinstance(a, StopProcesses)]
    result = CleanResult(_stop_all(stops, grace_s, journal, say) if stops else [])
    host = live_host()
    for act in actions:
        if isinstance(act, StopProcesses):
            continue
        removal = _remove(host, act, options.shm_min_age_s, journal)
        say(f"  {removal.target}: {removal.result}")
        result.outcomes.append(Outcome(act.kind, removal.target, removal.result, removal.ok))
    return result


def figures(found: Findings) -> dict[str, Any]:
    """The before/after numbers a person wants to see move; None where a source could not
    be read (an unread segment table is not an empty one)."""
    facts, shm, leaks = found.facts, found.leaked_files, found.leaks
    segs = facts.segments
    # never acted on: files whose holders could not all be checked
    unjudged = [j for j in found.shm or () if j.blocked] if found.shm_known else []
    huge = None
    if facts.hugepage_pools is not None:
        pools = (p for p in facts.hugepage_pools if p.node is None)
        huge = {p.size_label: {"free": p.free, "total": p.total} for p in pools}
    return {
        "hugepages_free": huge,
        "segments": None if segs is None else len(segs),
        "segment_bytes": None if segs is None else sum(s.size for s in segs),
        "leaked_segments": None if leaks is None else len(leaks),
        "orphans": None if found.orphans is None else len(found.orphans),
        "device_memory_free_bytes": None  # a device tool that failed: not "no device"
        if "devices" in facts.errors
        else {d.label: mib_bytes(d.free_mib) for d in facts.devices},
        "leaked_shm_files": None if shm is None else len(shm),
        "leaked_shm_bytes": None if shm is None else sum(j.file.used_bytes for j in shm),
        "unjudged_shm_files": len(unjudged),
        "unjudged_why": unjudged[0].reason.removeprefix("cannot tell: ") if unjudged else None,
    }
