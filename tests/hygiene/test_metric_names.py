"""Every metric `watch` exports passes promtool's lint rules (`promtool check metrics`).

promtool is a Go binary that CI machines may lack, so the rules it applies (client_golang's
promlint) are checked here in Python on every run; where promtool is installed (Debian's
`prometheus` package) it is run on the same text as well.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accelhost.host.base import Host
from accelhost.host.live import LiveHost
from accelhost.host.snapshot import load_snapshot
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher

BASE_UNITS = ("seconds", "bytes", "meters", "metres", "grams", "joules", "volts", "amperes")
SI_PREFIXES = ("nano", "micro", "milli", "centi", "kilo", "mega", "giga", "tera", "peta")
BINARY_PREFIXES = ("kibi", "mebi", "gibi", "tebi")
NON_BASE_TIME = ("minutes", "hours", "days", "weeks")
ABBREVIATIONS = {"s", "ms", "us", "ns", "sec", "b", "kb", "mb", "gb", "tb", "pb", "m", "h", "d"}
TYPE_WORDS = ("gauge", "counter", "histogram", "summary", "untyped")


def lint(text: str) -> list[str]:
    """promlint's problems for an exposition, as `name: problem` lines."""
    problems = []
    types: dict[str, str] = {}
    helps: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(None, 3)
        if len(parts) >= 4 and parts[0] == "#" and parts[1] == "TYPE":
            types[parts[2]] = parts[3]
        elif len(parts) >= 3 and parts[0] == "#" and parts[1] == "HELP":
            helps[parts[2]] = parts[3] if len(parts) > 3 else ""
    for name, kind in types.items():
        tokens = name.split("_")
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            problems.append(f"{name}: not snake_case (or has reserved characters)")
        if not helps.get(name, "").strip():
            problems.append(f"{name}: no help text")
        if kind == "counter" and not name.endswith("_total"):
            problems.append(f"{name}: counter without _total")
        if kind != "counter" and name.endswith("_total"):
            problems.append(f"{name}: non-counter with _total")
        if kind not in ("histogram", "summary") and name.endswith(("_count", "_sum")):
            problems.append(f"{name}: non-histogram with _count/_sum")
        if kind != "histogram" and name.endswith("_bucket"):
            problems.append(f"{name}: non-histogram with _bucket")
        for tok in tokens:
            if tok in ABBREVIATIONS:
                problems.append(f"{name}: abbreviated unit {tok!r}")
            if tok in NON_BASE_TIME:
                problems.append(f"{name}: use seconds, not {tok}")
            for prefix in SI_PREFIXES + BINARY_PREFIXES:
                if tok.startswith(prefix) and tok[len(prefix) :] in BASE_UNITS:
                    problems.append(f"{name}: use the base unit, not {tok}")
        if any(word in tokens for word in TYPE_WORDS):
            problems.append(f"{name}: metric type in the name")
    return problems


def _expositions() -> list[str]:
    """What watch serves: a recorded NPU host (device series, clean counters), this host
    (HugePages, SysV and POSIX shared memory), and a failed round (all UNKNOWN)."""
    texts = []
    snap = load_snapshot("example:a2-192cpu-8npu-sees-npu0")
    w = Watcher(lambda: snap, HygieneOptions(), WatchConfig(), lambda _e: None)
    w.run_once()
    w.collector.count_clean("stop", "ok")
    texts.append(generate_latest(w.registry).decode())
    w = Watcher(LiveHost, HygieneOptions(), WatchConfig(), lambda _e: None)
    w.run_once()
    texts.append(generate_latest(w.registry).decode())

    def broken() -> Host:
        raise OSError("gone")

    w = Watcher(broken, HygieneOptions(), WatchConfig(), lambda _e: None)
    w.run(threading.Event(), rounds=1)
    texts.append(generate_latest(w.registry).decode())
    return texts


def test_lint_catches_what_promtool_catches() -> None:
    bad = (
        "# HELP accelhost_hugepages_total pages\n# TYPE accelhost_hugepages_total gauge\n"
        "# HELP accelhost_runs runs\n# TYPE accelhost_runs counter\n"
        "# HELP accelhost_wait_ms wait\n# TYPE accelhost_wait_ms gauge\n"
        "# HELP accelhost_used_megabytes used\n# TYPE accelhost_used_megabytes gauge\n"
        "# HELP accelhostFoo foo\n# TYPE accelhostFoo gauge\n"
        "# HELP accelhost_x_gauge x\n# TYPE accelhost_x_gauge gauge\n"
    )
    problems = lint(bad)
    for name in (
        "accelhost_hugepages_total",
        "accelhost_runs",
        "accelhost_wait_ms",
        "accelhost_used_megabytes",
        "accelhostFoo",
        "accelhost_x_gauge",
    ):
        assert any(p.startswith(f"{name}:") for p in problems), name


def test_every_exported_metric_passes_the_lint_rules() -> None:
    seen: set[str] = set()
    for text in _expositions():
        assert lint(text) == []
        seen |= {f.name for f in text_string_to_metric_families(text)}
        promtool = shutil.which("promtool")
        if promtool:  # the real linter too, where it is installed
            res = subprocess.run(
                [promtool, "check", "metrics"],
                input=text,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert res.returncode == 0 and not res.stdout.strip(), res.stdout + res.stderr
    for name in (
        "accelhost_check_status",
        "accelhost_hugepages_pages",
        "accelhost_posix_shm_leaked_bytes",
        "accelhost_device_memory_used_bytes",
        "accelhost_clean_actions",  # a counter: exposed as accelhost_clean_actions_total
    ):
        assert name in seen, name


def test_check_status_is_one_series_per_state() -> None:
    snap = load_snapshot("example:a2-192cpu-8npu-sees-npu0")
    w = Watcher(lambda: snap, HygieneOptions(), WatchConfig(), lambda _e: None)
    w.run_once()
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(w.registry).decode())}
    by_check: dict[str, dict[str, float]] = {}
    for s in fams["accelhost_check_status"].samples:
        by_check.setdefault(s.labels["check"], {})[s.labels["state"]] = s.value
    for check, states in by_check.items():
        assert set(states) == {"OK", "WARN", "FAIL", "UNKNOWN", "SKIP"}, check
        assert sum(states.values()) == 1.0, check
    assert by_check["preflight"]["SKIP"] == 1.0 and by_check["preflight"]["OK"] == 0.0
