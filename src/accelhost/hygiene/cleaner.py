"""The cleaner: the only writer in the hygiene package.

`plan_clean` is pure: it turns facts into a list of actions, each with its reason, so a dry
run prints exactly what `--yes` would do. `execute` does those actions and nothing else:
every action is journaled before it is taken, every process is re-identified (pid and
start time, through a pidfd) before it is signalled, and every segment is re-read and
re-judged by the leak rule at the moment of removal.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from accelhost.errors import AccelhostError
from accelhost.host.live import LiveHost
from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.rules import find_orphans, judge_segment, leaked_segments, protected_pids
from accelhost.hygiene.text import human_bytes, one_line
from accelhost.procs import ProcessInfo, descendants, read_process
from accelhost.shm import read_segments, remove_segment

DEFAULT_JOURNAL = "/var/log/accelhost/clean.jsonl"
DEFAULT_GRACE_S = 10.0


@dataclass(frozen=True)
class ProcessRef:
    """A process as it was when planned: pid plus start time, to refuse a reused pid."""

    pid: int
    start_ticks: int
    state: str
    cmdline: str


@dataclass(frozen=True)
class StopProcesses:
    """SIGTERM, wait, SIGKILL, wait: one orphan's group (or lone orphan) and its descendants."""

    pgid: int
    signal_group: bool
    targets: tuple[ProcessRef, ...]
    reason: str
    kind: str = "stop"

    def describe(self) -> str:
        pids = " ".join(str(t.pid) for t in self.targets)
        how = f"group {self.pgid} and pids {pids}" if self.signal_group else f"pids {pids}"
        return f"stop {how}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "pgid": self.pgid,
            "signal_group": self.signal_group,
            "pids": [t.pid for t in self.targets],
            "targets": [asdict(t) for t in self.targets],
            "reason": self.reason,
        }


@dataclass(frozen=True)
class RemoveSegment:
    """`shmctl(IPC_RMID)` of one shmid, if it still passes the leak rule when we get there.

    `after_stop` segments belong to processes this plan stops: judged once they are gone,
    without the idle grace (we know why they are idle).
    """

    shmid: int
    key: str
    size: int
    cpid: int
    lpid: int
    ctime: int
    reason: str
    after_stop: bool = False
    kind: str = "remove_segment"

    def describe(self) -> str:
        when = " (once its processes are stopped, if then unattached)" if self.after_stop else ""
        return (
            f"remove segment shmid {self.shmid} (key {self.key}, {human_bytes(self.size)}, "
            f"creator {self.cpid}){when}: {self.reason}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["bytes"] = d.pop("size")
        return d


Action = StopProcesses | RemoveSegment


@dataclass(frozen=True)
class CleanFilters:
    """Narrow the plan: only these pids / shmids / segment owners / keys (empty = all)."""

    pids: frozenset[int] = frozenset()
    shmids: frozenset[int] = frozenset()
    owners: frozenset[int] = frozenset()
    keys: frozenset[int] = frozenset()
    orphans: bool = True
    segments: bool = True


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
        groups: dict[tuple[int, bool], list[Any]] = {}
        for o in orphans:
            # A whole group is signalled only when its leader is gone and it holds no
            # protected process; otherwise each orphan is signalled alone.
            whole = o.group_orphaned and not any(
                p.pgid == o.proc.pgid for pid, p in procs.items() if pid in protected
            )
            key = (o.proc.pgid, whole) if whole else (-o.proc.pid, False)
            groups.setdefault(key, []).append(o)
        for (_, whole), members in sorted(groups.items(), key=lambda kv: abs(kv[0][0])):
            pids: list[int] = []
            for o in members:
                for pid in [o.proc.pid, *descendants(procs, o.proc.pid)]:
                    if pid not in pids and pid not in protected and pid not in stopping:
                        pids.append(pid)
            if not pids:
                continue
            stopping.update(pids)
            reasons = "; ".join(dict.fromkeys(o.reason for o in members))
            first = members[0].proc
            actions.append(
                StopProcesses(
                    pgid=first.pgid,
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
    return actions


class Journal:
    """Append-only JSON lines, flushed and synced before the action it announces."""

    def __init__(self, path: str | Path, run_id: str | None = None) -> None:
        self.path = Path(path)
        self.run_id = run_id or uuid.uuid4().hex[:12]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise AccelhostError(
                f"cannot open the journal {self.path}: {exc.strerror}; "
                "give another one with --journal FILE"
            ) from None

    def write(self, event: str, **fields: Any) -> None:
        record = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "run": self.run_id,
            "event": event,
            **fields,
        }
        try:
            self._fh.write(json.dumps(record, sort_keys=False) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            # No record, no action: the caller stops before doing what was not journaled.
            raise AccelhostError(
                f"cannot write the journal {self.path}: {exc.strerror}; stopped before "
                f"the {fields.get('action', event)} it would record"
            ) from None

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a full disk already reported by write()
            self._fh.close()


@dataclass
class Outcome:
    action: str
    target: str
    result: str
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class CleanResult:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)


def _is_gone(pid: int, start_ticks: int) -> bool:
    """Exited (or a zombie, or the pid now belongs to someone else)."""
    info = read_process(LiveHost(), pid)
    return info is None or info.is_zombie or info.start_ticks != start_ticks


def _state(pid: int) -> str | None:
    info = read_process(LiveHost(), pid)
    return None if info is None else info.state


class _Tracked:
    """One target process, re-identified by pid and start time before every signal.

    With a pidfd (Linux 5.3+) the identity is pinned once: signals through it can never
    reach a process that later got the same pid. Older kernels (4.19 is common on Ascend
    hosts) get the same check by start time just before each `kill`; the window left is
    the few microseconds between that check and the signal.
    """

    def __init__(self, ref: ProcessRef) -> None:
        self.ref = ref
        self.fd: int | None = None
        self._by_pid = False
        self._gone = False
        # Why a signal could not be sent (EPERM: another user's process, no CAP_KILL).
        self.denied: str | None = None
        try:
            self.fd = os.pidfd_open(ref.pid)
        except ProcessLookupError:
            self._gone = True
            return
        except (OSError, AttributeError):
            self._by_pid = True  # no pidfd on this kernel
        # The pid names whatever has it now: check it is the process we planned.
        if _is_gone(ref.pid, ref.start_ticks):
            self._gone = True
            self.close()

    @property
    def alive(self) -> bool:
        if self._gone:
            return False
        if self._by_pid:
            self._gone = _is_gone(self.ref.pid, self.ref.start_ticks)
            return not self._gone
        if self.fd is None:
            return False
        return not select.select([self.fd], [], [], 0)[0]

    def send(self, sig: int) -> None:
        if self._gone:
            return
        try:
            if self.fd is not None:
                signal.pidfd_send_signal(self.fd, sig)
            elif self._by_pid and not _is_gone(self.ref.pid, self.ref.start_ticks):
                os.kill(self.ref.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            self.denied = "not permitted to signal it (run as root or as its owner)"

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _group_still_ours(pgid: int, tracked: list[_Tracked]) -> bool:
    for t in tracked:
        if not t.alive:
            continue
        info = read_process(LiveHost(), t.ref.pid)
        if info is not None and info.pgid == pgid and info.start_ticks == t.ref.start_ticks:
            return True
    return False


def _wait(tracked: list[_Tracked], grace_s: float, sleep: Callable[[float], None]) -> None:
    deadline = time.monotonic() + grace_s
    while any(t.alive for t in tracked) and time.monotonic() < deadline:
        sleep(0.05)


def _stop_all(
    stops: list[StopProcesses],
    grace_s: float,
    journal: Journal,
    result: CleanResult,
    say: Callable[[str], None],
    sleep: Callable[[float], None],
) -> None:
    tracked: dict[int, list[_Tracked]] = {}
    for n, act in enumerate(stops):
        tracked[n] = [_Tracked(t) for t in act.targets]
    try:
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
            sent = False
            for n, act in enumerate(stops):
                live = [t for t in tracked[n] if t.alive]
                if not live:
                    continue
                journal.write(
                    "intent",
                    action="signal",
                    signal=name,
                    pgid=act.pgid if act.signal_group else None,
                    pids=[t.ref.pid for t in live],
                    cmdlines=[one_line(t.ref.cmdline, 300) for t in live],
                    reason=act.reason,
                )
                # The group id is reserved while any member lives; a tracked (pidfd-verified)
                # member still in the group proves it is the same group, not a new one.
                if act.signal_group and _group_still_ours(act.pgid, tracked[n]):
                    try:
                        os.killpg(act.pgid, sig)
                    except ProcessLookupError:
                        pass
                    except PermissionError as exc:
                        say(f"  killpg({act.pgid}, {name}): {exc.strerror}")
                for t in live:
                    t.send(sig)
                    if t.denied:
                        say(f"  pid {t.ref.pid}: {t.denied}")
                sent = True
                say(
                    f"  {name} -> {'group ' + str(act.pgid) + ', ' if act.signal_group else ''}"
                    f"pids {' '.join(str(t.ref.pid) for t in live)}"
                )
            if sent:
                _wait([t for ts in tracked.values() for t in ts], grace_s, sleep)
        for ts in tracked.values():
            for t in ts:
                target = f"pid {t.ref.pid}"
                if not t.alive:
                    outcome = Outcome("stop", target, "gone", True)
                elif t.denied:
                    outcome = Outcome("stop", target, t.denied, False)
                else:
                    state = _state(t.ref.pid)
                    if state == "D":
                        outcome = Outcome(
                            "stop",
                            target,
                            "in D state (uninterruptible): not retried; it needs a device "
                            "reset (npu-smi set -t reset -i N / nvidia-smi -r -i N)",
                            False,
                        )
                    else:
                        outcome = Outcome("stop", target, "still alive after SIGKILL", False)
                journal.write("outcome", action="stop", pid=t.ref.pid, result=outcome.result)
                result.outcomes.append(outcome)
    finally:
        for ts in tracked.values():
            for t in ts:
                t.close()


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
    if stops:
        _stop_all(stops, grace_s, journal, result, say, sleep)
    if removes:
        _remove_segments(removes, options, journal, result, say, remover)
    return result


def figures(facts: HostFacts, options: HygieneOptions) -> dict[str, Any]:
    """The before/after numbers a person wants to see move; None where a source could not
    be read (an unread segment table is not an empty one)."""
    segs = facts.segments
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
    }
