"""What `watch` exports: the latest round only, and the watch's own cost.

A scrape describes the host now, so a device or pool that disappears leaves no stale
series; a source that cannot be read exports no sample. The watch's own cost per round
(CPU and wall seconds, full scans) is exported too, so an operator sees what it takes.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import make_wsgi_app
from prometheus_client.registry import Collector, CollectorRegistry

from accelhost.formats import MIB
from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.judge.rules import LeakVerdict, Orphan, ShmVerdict
from accelhost.hygiene.report import CHECK_NAMES, STATUSES, UNKNOWN, DoctorReport
from accelhost.parsers.sysvipc import ShmSegment

# A scrape takes milliseconds. A connection idle this long is closed, and at most
# MAX_SCRAPES are served at once (more are closed at once): each holds a thread and a file
# descriptor, and a client that opens and never asks must not take them all (at the
# systemd default of 1,024 descriptors every round would fail with EMFILE).
SCRAPE_TIMEOUT_S = 10.0
MAX_SCRAPES = 16
STATUS_HELP = "Check status: 1 for the check's current state, 0 for the others"
# The help text of each metric that is one sample without labels.
HELP = {
    "accelhost_watch_runs": "Rounds of checks run",
    "accelhost_watch_round_failures": "Rounds that could not run at all",
    "accelhost_watch_cpu_seconds": "CPU time the watch's rounds took",
    "accelhost_watch_round_seconds": "Wall time the watch's rounds took",
    "accelhost_watch_full_scans": "Rounds that read every process's open files and mappings",
    "accelhost_watch_last_round_cpu_seconds": "CPU time of the last round",
    "accelhost_watch_last_round_duration_seconds": "Wall time of the last round",
    "accelhost_watch_last_run_timestamp_seconds": "When the last round finished",
    "accelhost_shm_leaked_bytes": "Bytes in leaked System V segments",
    "accelhost_shm_leaked_segments": "Leaked System V segments",
    "accelhost_posix_shm_leaked_files": "Leaked POSIX shared-memory files (/dev/shm)",
    "accelhost_posix_shm_leaked_bytes": "Bytes used by leaked POSIX shared-memory files "
    "(allocated blocks)",
    "accelhost_orphan_processes": "Orphan engine processes",
}


def _single(
    family: type[CounterMetricFamily | GaugeMetricFamily], name: str, value: float
) -> Metric:
    fam = family(name, HELP[name])
    fam.add_metric([], value)
    return fam


def _status_family(states: dict[str, str]) -> GaugeMetricFamily:
    """One series per (check, state), like kube-state-metrics: alerts read `== 1` and a
    SKIP or UNKNOWN can never be mistaken for OK."""
    fam = GaugeMetricFamily("accelhost_check_status", STATUS_HELP, labels=["check", "state"])
    for check, current in states.items():
        for state in STATUSES:
            fam.add_metric([check, state], 1.0 if state == current else 0.0)
    return fam


@dataclass(frozen=True)
class Round:
    """What one round learned, reduced to the numbers the metrics export."""

    facts: HostFacts
    report: DoctorReport
    leaked_bytes: int | None
    leaked_count: int | None
    orphans: int | None
    finished: float
    shm_files: int | None = None
    shm_bytes: int | None = None

    @classmethod
    def of(
        cls,
        facts: HostFacts,
        report: DoctorReport,
        orphans: Sequence[Orphan] | None,
        leaks: Sequence[tuple[ShmSegment, LeakVerdict]] | None,
        shm: Sequence[ShmVerdict] | None,
    ) -> Round:
        """The round's findings as numbers (None: could not tell, no sample)."""
        return cls(
            facts=facts,
            report=report,
            leaked_bytes=None if leaks is None else sum(s.size for s, _ in leaks),
            leaked_count=None if leaks is None else len(leaks),
            orphans=None if orphans is None else len(orphans),
            finished=time.time(),
            shm_files=None if shm is None else len(shm),
            shm_bytes=None if shm is None else sum(j.file.used_bytes for j in shm),
        )


@dataclass
class WatchTotals:
    """The watch's own counters, and the cost of its last round."""

    runs: int = 0
    failures: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0
    full_scans: int = 0
    last_cpu_s: float = 0.0
    last_wall_s: float = 0.0


class HygieneCollector(Collector):
    """Exports the latest round only; registered in a per-watch registry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._round: Round | None = None
        self._failed = False
        self._totals = WatchTotals()
        self._clean_actions: Counter[tuple[str, str]] = Counter()
        self._degraded: dict[str, str] = {}

    def update(self, rnd: Round) -> None:
        with self._lock:
            self._round = rnd
            self._failed = False
            self._totals.runs += 1

    def cost(self, cpu_s: float, wall_s: float, full_scan: bool) -> None:
        """The watch's own cost of one round (failed rounds too)."""
        with self._lock:
            t = self._totals
            t.cpu_s += cpu_s
            t.wall_s += wall_s
            t.last_cpu_s, t.last_wall_s = cpu_s, wall_s
            t.full_scans += int(full_scan)

    def degraded(self, source: str, why: str) -> None:
        """A source of changes was lost (process events, inotify): rounds read in full."""
        with self._lock:
            self._degraded[source] = why

    def fail(self) -> None:
        """A round broke: drop the last round's numbers (they no longer describe the host)
        and export every check as UNKNOWN until a round succeeds again."""
        with self._lock:
            self._round = None
            self._failed = True
            self._totals.runs += 1
            self._totals.failures += 1

    def latest(self) -> Round | None:
        """The last round's numbers (None before the first, or after a failed one)."""
        with self._lock:
            return self._round

    def rounds_done(self) -> int:
        with self._lock:
            return self._totals.runs

    def full_scans(self) -> int:
        with self._lock:
            return self._totals.full_scans

    def count_clean(self, kind: str, result: str) -> None:
        with self._lock:
            self._clean_actions[kind, result] += 1

    def collect(self) -> Iterator[Metric]:
        # the order of the families is what /metrics shows (docs/hygiene.md quotes it)
        with self._lock:
            rnd, failed, t = self._round, self._failed, replace(self._totals)
            cleaned, degraded = dict(self._clean_actions), dict(self._degraded)
        yield _single(CounterMetricFamily, "accelhost_watch_runs", t.runs)
        yield _single(CounterMetricFamily, "accelhost_watch_round_failures", t.failures)
        actions = CounterMetricFamily(
            "accelhost_clean_actions", "Actions taken by --auto-clean", labels=["kind", "result"]
        )
        for (kind, result), n in sorted(cleaned.items()):
            actions.add_metric([kind, result], n)
        yield actions
        yield _single(CounterMetricFamily, "accelhost_watch_cpu_seconds", t.cpu_s)
        yield _single(CounterMetricFamily, "accelhost_watch_round_seconds", t.wall_s)
        yield _single(CounterMetricFamily, "accelhost_watch_full_scans", t.full_scans)
        yield _single(GaugeMetricFamily, "accelhost_watch_last_round_cpu_seconds", t.last_cpu_s)
        yield _single(
            GaugeMetricFamily, "accelhost_watch_last_round_duration_seconds", t.last_wall_s
        )
        fallback = GaugeMetricFamily(
            "accelhost_watch_fallback",
            "1 when a source of changes (process events, shm listing) was lost and rounds "
            "read the host in full instead",
            labels=["source"],
        )
        for source in sorted(degraded):
            fallback.add_metric([source], 1.0)
        yield fallback
        if rnd is None:
            if failed:
                yield _status_family({name: UNKNOWN for name in CHECK_NAMES})
            return
        yield _single(GaugeMetricFamily, "accelhost_watch_last_run_timestamp_seconds", rnd.finished)
        states = {c.name: c.status for c in rnd.report.checks}
        yield _status_family(states)
        yield from _hugepages_family(rnd.facts)
        gauges: dict[str, float] = {}
        if rnd.leaked_bytes is not None and rnd.leaked_count is not None:
            gauges["accelhost_shm_leaked_bytes"] = rnd.leaked_bytes
            gauges["accelhost_shm_leaked_segments"] = rnd.leaked_count
        if rnd.shm_files is not None and rnd.shm_bytes is not None:
            gauges["accelhost_posix_shm_leaked_files"] = rnd.shm_files
            gauges["accelhost_posix_shm_leaked_bytes"] = rnd.shm_bytes
        if rnd.orphans is not None and states.get("orphan_engines") != UNKNOWN:
            # processes hidden from the reader (hidepid) may be orphans: no sample, not 0
            gauges["accelhost_orphan_processes"] = rnd.orphans
        yield from (_single(GaugeMetricFamily, n, v) for n, v in gauges.items())
        yield from _device_families(rnd.facts)


def _hugepages_family(facts: HostFacts) -> Iterator[Metric]:
    """The host's HugePages pools, as this round read them."""
    if facts.hugepage_pools is not None:
        pages = GaugeMetricFamily(
            "accelhost_hugepages_pages",
            "Host HugePages pool by page size and state (total, free, reserved, surplus; "
            "reserved pages are also free)",
            labels=["size_bytes", "state"],
        )
        for p in facts.hugepage_pools:
            if p.node is None:
                size = str(p.size_kb * 1024)
                for state in ("total", "free", "reserved", "surplus"):
                    pages.add_metric([size, state], getattr(p, state))
        yield pages


def _device_families(facts: HostFacts) -> Iterator[Metric]:
    """Device memory, as this round read it."""
    known = [d for d in facts.devices if d.used_mib is not None and d.total_mib is not None]
    if "devices" in facts.errors or not known:
        return
    used = GaugeMetricFamily(
        "accelhost_device_memory_used_bytes", "Device memory in use", labels=["device"]
    )
    tot = GaugeMetricFamily(
        "accelhost_device_memory_total_bytes", "Device memory size", labels=["device"]
    )
    unatt = GaugeMetricFamily(
        "accelhost_device_memory_unattributed_bytes",
        "Device memory in use by no listed process",
        labels=["device"],
    )
    # Without the per-process table (a failed compute-apps query) nothing can be
    # attributed: no unattributed sample rather than "all of it".
    per_process = "device_processes" not in facts.errors
    for d in known:
        assert d.used_mib is not None and d.total_mib is not None
        attributed = sum(r.memory_mib or 0 for r in d.processes)
        used.add_metric([d.label], d.used_mib * MIB)
        tot.add_metric([d.label], d.total_mib * MIB)
        if per_process and all(r.memory_mib is not None for r in d.processes):
            unatt.add_metric([d.label], max(0, d.used_mib - attributed) * MIB)
    yield used
    yield tot
    if per_process:
        yield unatt


class _ScrapeHandler(WSGIRequestHandler):
    timeout = SCRAPE_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """A scrape is no event of the watch's log."""


class MetricsServer(ThreadingMixIn, WSGIServer):
    """/metrics of `registry` on (host, port), a thread per scrape, bounded in number and
    time (SCRAPE_TIMEOUT_S, MAX_SCRAPES); `serve_forever` in a thread of the caller's."""

    daemon_threads = True

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        self.address_family = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0][0]
        self._slots = threading.BoundedSemaphore(MAX_SCRAPES)
        super().__init__((host, port), _ScrapeHandler)
        self.set_app(make_wsgi_app(registry))

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went quiet or away is not the watch's error (no traceback)."""
