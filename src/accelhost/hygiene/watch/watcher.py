"""`accelhost watch`: the doctor on a timer, as Prometheus metrics and change logs.

Memory stays bounded over days: the collector keeps only the latest round (`metrics`), the
change detector one status per check, the auto-cleaner only the orphans of the previous
round, and the incremental state only what exists now. On a live host a round reads only
what changed, and an engine's death or a new engine file starts one at once (`react`); a
snapshot is read whole every round. An unanswered query turns its check UNKNOWN: it is
never shown as an idle device.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client.registry import CollectorRegistry

from accelhost.errors import AccelhostError, UsageError
from accelhost.host.base import Host, InodeLister
from accelhost.host.redact import redact_values
from accelhost.hygiene.clean.actions import CleanFilters, RemoveSegment
from accelhost.hygiene.clean.cleaner import execute, plan_clean
from accelhost.hygiene.clean.journal import DEFAULT_JOURNAL, Journal, rfc3339_now
from accelhost.hygiene.doctor.checks import run_checks
from accelhost.hygiene.facts.host import HostFacts, read_facts
from accelhost.hygiene.facts.rounds import DEFAULT_FULL_EVERY, IncrementalState
from accelhost.hygiene.judge.attribution import Attribution
from accelhost.hygiene.judge.containers import (
    ContainerScope,
    HolderMemory,
    containers_named,
    scope_actions,
)
from accelhost.hygiene.judge.findings import Findings, find
from accelhost.hygiene.judge.rules import LeakVerdict, Orphan, ShmVerdict
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import DoctorReport
from accelhost.hygiene.watch.kept import KeptNotes
from accelhost.hygiene.watch.metrics import HygieneCollector, Round
from accelhost.hygiene.watch.react import Reactor
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.remove import DEFAULT_GRACE_S

# A file due to reach --shm-min-age is judged this long after it does (its mtime is whole
# seconds on some filesystems).
DUE_SLACK_S = 0.1
# An orphan seen in fewer than --clean-orphan-rounds rounds is looked at again this soon,
# not at --interval: the rounds confirm it is still an orphan (its frontend did not come
# back for it), and a round the frontend's exit started must not leave it for a minute.
CONFIRM_S = 2.0


@dataclass(frozen=True)
class WatchConfig:
    interval_s: float = 30.0
    auto_clean: bool = False
    # Clean segments once this many leaked bytes are seen (1 = any leaked segment).
    clean_leaked_bytes: int = 1
    # Stop an orphan only after it was seen in this many consecutive rounds.
    clean_orphan_rounds: int = 2
    journal: str = DEFAULT_JOURNAL
    grace_s: float = DEFAULT_GRACE_S
    # Auto-clean never reaches beyond this scope (pids, shmids, owners, keys; empty = all).
    scope: CleanFilters = CleanFilters()
    # Read the whole host every this many rounds (a safety net under incremental rounds).
    full_every: int = DEFAULT_FULL_EVERY


def json_logger(stream: Any = None) -> Callable[[dict[str, Any]], None]:
    """One JSON object per line (journald and Kubernetes log collectors keep it whole)."""

    def log(event: dict[str, Any]) -> None:
        out = stream or sys.stdout
        out.write(json.dumps({"ts": rfc3339_now(), **event}) + "\n")
        out.flush()

    return log


class Watcher:
    def __init__(
        self,
        host_factory: Callable[[], Host],
        options: HygieneOptions,
        config: WatchConfig,
        log: Callable[[dict[str, Any]], None],
    ) -> None:
        self.host_factory = host_factory
        self.options = options
        self.config = config
        # whoever collects the log (journald, a cluster's aggregator) gets no secrets
        self.log: Callable[[dict[str, Any]], None] = lambda event: log(redact_values(event))
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = HygieneCollector()
        self.registry.register(self.collector)
        self._last_status: dict[str, str] = {}
        self._state = IncrementalState(options, config.full_every)
        self._incremental = False
        # the facts' clock (boot time + uptime: whole seconds of boot time) minus time.time():
        # a file is due at its --shm-min-age by the clock it is judged by
        self._clock_offset = 0.0
        self._orphan_rounds: dict[tuple[int, int], int] = {}
        self._orphans_looked: set[tuple[int, int]] = set()  # orphans a full look confirmed
        self._engine_segments: set[tuple[int, int]] = set()  # (shmid, ctime) an engine made
        self._holders = HolderMemory()  # which container held each /dev/shm file
        self._clean_error: str | None = None  # why the last --auto-clean could not act
        self._kept = KeptNotes(self.log, options, config.clean_leaked_bytes)
        # --container: only what it runs or left (its checks, metrics and auto-clean)
        self._scope = None if options.container is None else ContainerScope(options.container)

    def run_once(self) -> Round:
        cpu0, wall0 = time.thread_time(), time.perf_counter()
        full = True
        try:
            rnd = self._round()
            full = self._state.last.holder_scan or not self._incremental
            return rnd
        finally:
            self.collector.cost(time.thread_time() - cpu0, time.perf_counter() - wall0, full)

    def _read(self, host: Host, tools_of: HostFacts | None = None) -> HostFacts:
        """Facts of this round: on a live host, read incrementally (only what changed)."""
        self._incremental = self._live(host)
        return read_facts(host, self.options, self._state, tools_of)

    def _find(self, facts: HostFacts) -> Findings:
        """This round's findings, whose each is told knowing what earlier rounds saw."""
        ipc = self._scope.ipc_modes if self._scope else None
        att = Attribution(facts, self.options.catalog, self._holders.seen, ipc)
        return find(facts, self.options, att)

    def _round(self) -> Round:
        host = self.host_factory()
        found = self._find(self._read(host))
        orphans = found.orphans
        if orphans and self._incremental and not self._state.last.full:
            seen = {(o.proc.pid, o.proc.start_ticks) for o in orphans}
            stoppable = self.config.auto_clean and any(o.group_frontend is None for o in orphans)
            if stoppable or not seen <= self._orphans_looked:
                # An incremental round may hold a parent's command line from before an
                # exec (`bash start.sh` that became `vllm serve`): its healthy engine child
                # would look like an orphan under a shell. A new orphan is believed only
                # on a full look (rare: an engine died), and a round that may stop one is
                # a full look, as `clean`'s is. The device tools (seconds each on an NPU
                # host) are not run again: what is stale is a process's command line, not
                # their answer of a moment ago, and no removal reads it (the stop and the
                # unlinks are judged on processes, holders and segments, read afresh).
                self._state.force_full()
                found = self._find(self._read(host, tools_of=found.facts))
                orphans = found.orphans
        if not self._incremental or self._state.last.full:
            self._orphans_looked = {(o.proc.pid, o.proc.start_ticks) for o in orphans or ()}
        facts, att = found.facts, found.attribution
        self._note_engine_segments(facts)
        self._state.note_waiting((v.waiting_s for v in found.shm or ()), facts.now_epoch)
        if facts.now_epoch is not None:
            self._clock_offset = facts.now_epoch - time.time()
        chosen = None if self._scope is None else self._scope.resolve(att)
        report = run_checks(facts, self.options, found=found, chosen=chosen)
        self._holders.remember(att)
        leaks, shm = found.leaks, found.leaked_files
        if self._scope is not None:  # only what the chosen container(s) run or left
            orphans, leaks, shm = self._scope.narrow(found)
        rnd = Round.of(facts, report, orphans, leaks, shm)
        self.collector.update(rnd)
        self._log_changes(report)
        if self.config.auto_clean and host.is_live:
            self._auto_clean(found, orphans or (), leaks or [], shm or [])
        return rnd

    def _note_engine_segments(self, facts: HostFacts) -> None:
        """Remember each SysV segment made by an engine process while it is there to be
        seen (its creator, started before the segment was): the only segments --auto-clean
        removes unasked. A segment is also how other software keeps state between its
        processes (one makes it and exits, the others attach later): one nobody named,
        made by no engine we saw, stays in the report for a person (`clean`)."""
        segments = facts.segments or ()
        self._engine_segments &= {(s.shmid, s.ctime) for s in segments}
        procs, now = facts.processes or {}, facts.now_epoch
        for s in segments:
            p = procs.get(s.cpid)
            if p is None or now is None or (age := facts.process_age_s(p)) is None:
                continue
            # the creator, not a process that reused its pid
            if now - age <= s.ctime + 1 and self.options.catalog.is_engine(p.command):
                self._engine_segments.add((s.shmid, s.ctime))

    def _log_changes(self, report: DoctorReport) -> None:
        for c in report.checks:
            before = self._last_status.get(c.name)
            if before != c.status:
                self.log(
                    {
                        "event": "check_status",
                        "check": c.name,
                        "status": c.status,
                        "previous": before,
                        "summary": c.summary,
                        "pids": [e["pid"] for e in c.evidence if "pid" in e][:20],
                        "shmids": [e["shmid"] for e in c.evidence if "shmid" in e][:20],
                        # the containers its processes run in or its leftovers were left by
                        "containers": containers_named(c.evidence)[:20],
                    }
                )
            self._last_status[c.name] = c.status

    def _auto_clean(
        self,
        found: Findings,
        orphans: Sequence[Orphan],
        leaks: list[tuple[ShmSegment, LeakVerdict]],
        shm: list[ShmVerdict],
    ) -> None:
        # An orphan whose engine's frontend lives in its process group is never stopped
        # automatically: that server may still be stopping it, or be a neighbour started by
        # the same script; `accelhost clean` shows it to a person.
        keys = [(o.proc.pid, o.proc.start_ticks) for o in orphans if o.group_frontend is None]
        seen = {key: self._orphan_rounds.get(key, 0) + 1 for key in keys}
        self._orphan_rounds = seen  # only current orphans are remembered
        scope = self.config.scope
        # A scope that names things (pids, shmids, paths) leaves out every kind it does
        # not name: a watch scoped to some files never stops an orphan, nor the reverse.
        named = bool(scope.pids or scope.shmids or scope.paths)
        ripe = frozenset(
            pid
            for (pid, _), n in seen.items()
            if n >= self.config.clean_orphan_rounds
            and (pid in scope.pids if scope.pids else not named)
        )
        leaks = [(s, v) for s, v in leaks if scope.takes_segment(s) and (scope.shmids or not named)]
        asked = bool(scope.shmids or scope.keys)

        def may_go(seg: ShmSegment) -> bool:
            """Named by id or key, or seen made by an engine (`_note_engine_segments`)."""
            return asked or (seg.shmid, seg.ctime) in self._engine_segments

        unasked = [(s, v) for s, v in leaks if not may_go(s)]
        leaks = [(s, v) for s, v in leaks if may_go(s)]
        shm = [j for j in shm if scope.takes_file(j.file) and (scope.paths or not named)]
        leaked = sum(s.size for s, _ in leaks) + sum(j.file.used_bytes for j in shm)
        do_segments = bool(leaks or shm) and leaked >= self.config.clean_leaked_bytes
        kept_leaks, kept_files = ([], []) if do_segments else (leaks, shm)
        self._kept.say(orphans, unasked, kept_leaks, kept_files, leaked)
        if not ripe and not do_segments:
            return
        filters = replace(
            scope,
            pids=ripe,
            orphans=bool(ripe),
            segments=do_segments or bool(ripe),
            shm_files=do_segments and bool(shm),
        )
        # below the threshold only the segments of the orphans being stopped go (files are
        # planned only above it)
        planned = plan_clean(found.facts, self.options, filters, found)
        actions = [
            a
            for a in planned
            if not isinstance(a, RemoveSegment) or (may_go(a.seg) and (do_segments or a.after_stop))
        ]
        if self._scope is not None and self._scope.chosen is not None:
            actions = scope_actions(actions, found.attribution, self._scope.chosen)
        if not actions:
            return
        if self._clean_error is None:  # a retry after a failure is not said again
            self.log({"event": "auto_clean", "actions": [a.to_dict() for a in actions]})
        try:
            with contextlib.closing(Journal(self.config.journal)) as journal:
                result = execute(actions, self.options, journal, grace_s=self.config.grace_s)
        except AccelhostError as exc:
            # No record, no action (a full disk): the round's checks and metrics stand, the
            # actions count as failed each round, and the cause is said once, not per round.
            for a in actions:
                self.collector.count_clean(a.kind, "failed")
            if str(exc) != self._clean_error:
                self.log({"event": "auto_clean_failed", "error": str(exc)})
            self._clean_error = str(exc)
            return
        self._clean_error = None
        for out in result.outcomes:
            self.collector.count_clean(out.action, "ok" if out.ok else "failed")
        self.log({"event": "auto_clean_done", "outcomes": [o.to_dict() for o in result.outcomes]})

    @staticmethod
    def _live(host: Host) -> bool:
        return host.is_live and isinstance(host, InodeLister)

    def _reactor(self) -> Reactor:
        return Reactor.open(
            self.log,
            self.collector.degraded,
            self.options.shm_dirs,
            lambda n: self.options.catalog.shm_naming(n) is not None,
            self.options.catalog.is_engine,
        )

    def _wait(self, reactor: Reactor, stop: threading.Event, until: float) -> None:
        """Until the next round is due: `until`, an exit that matters, or a new engine
        file's --shm-min-age (which moves `until` closer, without a round of its own)."""
        while (wake := reactor.wait(stop, until)) is not None:
            if wake.lost:
                self._state.force_full()
                return
            if wake.exited:
                self.log({"event": "process_exit", "pids": list(wake.exited[:20])})
                self._state.note_exits(wake.exited)
                return
            due = time.monotonic() + self.options.shm_min_age_s - self._clock_offset + DUE_SLACK_S
            until = min(until, due)

    def run(self, stop: threading.Event, rounds: int | None = None) -> None:
        """Rounds every --interval until `stop`, and sooner on a live host (`react` says
        when). A failed round is counted and logged, and the next one reads the whole host;
        it never ends the watch, but a first round that finds the user's words wrong
        (`--container` naming none) does: UsageError."""
        done = 0
        reactor: Reactor | None = None
        try:
            if rounds != 1 and self._live(self.host_factory()):
                # before the first round lists the shm dirs: a file made after that
                # listing is told by inotify, one made before it is in the listing
                reactor = self._reactor()
            while not stop.is_set():
                started = time.monotonic()
                try:
                    self.run_once()
                except Exception as exc:  # a bad round is logged; the watch goes on
                    if done == 0 and isinstance(exc, UsageError):
                        raise
                    self.collector.fail()
                    self._state.force_full()
                    self.log({"event": "round_failed", "error": f"{type(exc).__name__}: {exc}"})
                done += 1
                if rounds is not None and done >= rounds:
                    return
                until = started + self.config.interval_s
                need = self.config.clean_orphan_rounds
                if self.config.auto_clean and any(n < need for n in self._orphan_rounds.values()):
                    until = min(until, started + CONFIRM_S)
                if self._incremental:
                    due = self._state.next_due(time.time() + self._clock_offset)
                    if due is not None:
                        until = min(until, time.monotonic() + due + DUE_SLACK_S)
                    if reactor is None:
                        reactor = self._reactor()
                    reactor.watch(self._state.react_pids())
                if reactor is None:
                    stop.wait(max(0.0, until - time.monotonic()))
                    continue
                self._wait(reactor, stop, until)
        finally:
            if reactor is not None:
                reactor.close()
