"""`accelhost doctor | clean | watch`: keep an accelerator host clean.

doctor reads and judges (exit 0 OK/WARN, 1 FAIL, 2 a check could not run); clean shows
what it would do and does it only with --yes; watch repeats the doctor, serves Prometheus
metrics and may clean when a threshold is crossed.
"""

from __future__ import annotations

import argparse
import pwd
import signal
import textwrap
import threading
from collections.abc import Sequence
from typing import Any

from accelhost.cli.common import (
    add_json_option,
    add_snapshot_option,
    host_from_args,
    print_json,
    render_table,
)
from accelhost.errors import AccelhostError
from accelhost.hygiene.checks import CHECK_NAMES, CheckResult, DoctorReport, run_checks
from accelhost.hygiene.cleaner import (
    DEFAULT_GRACE_S,
    DEFAULT_JOURNAL,
    Action,
    CleanFilters,
    Journal,
    execute,
    figures,
    plan_clean,
)
from accelhost.hygiene.facts import read_facts
from accelhost.hygiene.options import HygieneOptions, is_control_node
from accelhost.hygiene.text import human_bytes, one_line


def _add_common(p: argparse.ArgumentParser, min_age_alias: bool = False) -> None:
    add_snapshot_option(p)
    p.add_argument(
        "--device-glob",
        action="append",
        default=[],
        metavar="GLOB",
        help="also treat open files matching GLOB as device nodes (repeatable; adds to "
        "/dev/davinci*, /dev/nvidia*, /dev/kfd, /dev/dri/renderD*, ...)",
    )
    p.add_argument(
        "--engine-pattern",
        action="append",
        default=[],
        metavar="REGEX",
        help="also treat processes whose command line matches REGEX as engines "
        "(repeatable; adds to VLLM::, vllm, sglang, mindie)",
    )
    names = ["--shm-min-age", "--min-age"] if min_age_alias else ["--shm-min-age"]
    p.add_argument(
        *names,
        dest="shm_min_age",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a segment must be idle this long to count as leaked (default 60)",
    )
    p.add_argument(
        "--idle-baseline-mib",
        type=int,
        metavar="MIB",
        help="device memory an idle device may report as used "
        "(default 4096 on Ascend, 1024 on NVIDIA)",
    )
    p.add_argument(
        "--hugepages-threshold",
        type=float,
        default=0.90,
        metavar="FRACTION",
        help="WARN when a HugePages pool is used above this (default 0.90)",
    )


def _add_preflight(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--expect-util",
        type=float,
        metavar="U",
        help="preflight: will an engine with --gpu-memory-utilization U start?",
    )
    p.add_argument(
        "--device",
        type=int,
        metavar="N",
        help="preflight only device N (as npu-smi / nvidia-smi number it)",
    )


def register(subparsers: Any) -> None:
    doctor = subparsers.add_parser(
        "doctor",
        help="what is wrong on this host, the evidence, the fix",
        description="Run the hygiene checks: orphan engines, device holders, device memory "
        "held by nothing, leaked shared memory, HugePages, preflight, host tuning. "
        "Exit 0 OK/WARN, 1 FAIL, 2 a check could not run.",
    )
    _add_common(doctor)
    _add_preflight(doctor)
    add_json_option(doctor)
    doctor.add_argument(
        "--check",
        action="append",
        default=[],
        choices=CHECK_NAMES,
        help="run only this check (repeatable)",
    )
    doctor.set_defaults(func=doctor_main)

    clean = subparsers.add_parser(
        "clean",
        help="remove orphan engines and leaked segments (dry run unless --yes)",
        description="Show what would be removed and why; with --yes, do it, journaled.",
    )
    _add_common(clean, min_age_alias=True)
    add_json_option(clean)
    clean.add_argument("--yes", action="store_true", help="act (default: dry run)")
    clean.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help=f"wait this long after SIGTERM, then after SIGKILL (default {DEFAULT_GRACE_S:g})",
    )
    clean.add_argument(
        "--journal",
        default=DEFAULT_JOURNAL,
        metavar="FILE",
        help=f"JSON-lines journal, one line per action before it is taken "
        f"(default {DEFAULT_JOURNAL})",
    )
    clean.add_argument(
        "--only", choices=("orphans", "segments"), help="clean only orphans or only segments"
    )
    clean.add_argument(
        "--pid", type=int, action="append", default=[], help="only this orphan (repeatable)"
    )
    clean.add_argument(
        "--shmid", type=int, action="append", default=[], help="only this segment (repeatable)"
    )
    clean.add_argument(
        "--owner", action="append", default=[], help="only segments of this user or uid"
    )
    clean.add_argument(
        "--key", action="append", default=[], help="only segments with this key (0x... or decimal)"
    )
    clean.set_defaults(func=clean_main)

    watch = subparsers.add_parser(
        "watch",
        help="run the checks every --interval and serve Prometheus metrics",
        description="Keep watching: log check changes as JSON lines, serve metrics, and "
        "with --auto-clean remove orphans and leaked segments past a threshold.",
    )
    _add_common(watch)
    _add_preflight(watch)
    watch.add_argument(
        "--interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between rounds of checks (default 30)",
    )
    watch.add_argument(
        "--metrics-addr",
        default="127.0.0.1:9464",
        metavar="HOST:PORT",
        help="where to serve /metrics (default 127.0.0.1:9464; port 0 picks one; "
        "'none' serves nothing)",
    )
    watch.add_argument("--auto-clean", action="store_true", help="clean past the thresholds")
    watch.add_argument(
        "--clean-leaked-bytes",
        type=int,
        default=1,
        metavar="BYTES",
        help="auto-clean segments once this many bytes are leaked (default 1: any)",
    )
    watch.add_argument(
        "--clean-orphan-rounds",
        type=int,
        default=2,
        metavar="N",
        help="auto-clean an orphan seen in N consecutive rounds (default 2)",
    )
    watch.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help=f"--auto-clean: wait after SIGTERM, then SIGKILL (default {DEFAULT_GRACE_S:g})",
    )
    watch.add_argument(
        "--journal",
        default=DEFAULT_JOURNAL,
        metavar="FILE",
        help=f"--auto-clean's journal (default {DEFAULT_JOURNAL})",
    )
    watch.add_argument(
        "--rounds", type=int, metavar="N", help="stop after N rounds (default: run until stopped)"
    )
    watch.set_defaults(func=watch_main)


def _options(args: argparse.Namespace) -> HygieneOptions:
    if getattr(args, "device", None) is not None and getattr(args, "expect_util", None) is None:
        raise AccelhostError("--device N goes with --expect-util U")
    return HygieneOptions(
        device_globs=tuple(args.device_glob),
        engine_patterns=tuple(args.engine_pattern),
        shm_min_age_s=args.shm_min_age,
        expect_util=getattr(args, "expect_util", None),
        device=getattr(args, "device", None),
        idle_baseline_mib=args.idle_baseline_mib,
        hugepages_threshold=args.hugepages_threshold,
    )


# ---------------------------------------------------------------- doctor


def _mib(v: Any) -> str:
    return "?" if v is None else f"{v} MiB"


def _nodes(devices: Sequence[str]) -> list[str]:
    """Per-device nodes when there are any; driver control nodes only otherwise."""
    own = [d for d in devices if not is_control_node(d)]
    return own or list(devices)


def _age(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600}h"


def evidence_lines(check: CheckResult) -> list[str]:
    """Short human lines for one check's evidence (the JSON has everything)."""
    lines: list[str] = []
    if check.name == "device_holders":
        by_node: dict[str, list[str]] = {}
        for e in check.evidence:
            for node in _nodes(e.get("devices") or ["?"]):
                mem = e.get("device_memory_mib")
                state = e.get("state")
                text = f"pid {e['pid']}" + (f" [{state}]" if state and state not in "SRI" else "")
                text += f" {one_line(str(e.get('cmdline', '?')), 40)}" + (
                    f" {mem} MiB" if mem is not None else ""
                )
                by_node.setdefault(node, []).append(text)
        return [f"{node}: {'; '.join(v)}" for node, v in sorted(by_node.items())]
    for e in check.evidence:
        kind = e.get("kind")
        if kind == "process":
            age = e.get("age_s")
            text = f"pid {e['pid']} {one_line(str(e.get('cmdline', '')), 50)}"
            if age is not None:
                text += f", up {_age(age)}"
            if e.get("devices"):
                text += f", holds {' '.join(_nodes(e['devices']))}"
            if e.get("device_memory_mib") is not None:
                text += f" ({e['device_memory_mib']} MiB)"
            if e.get("reason") or e.get("detail"):
                text += f": {e.get('reason') or e.get('detail')}"
            lines.append(text)
        elif kind == "segment":
            lines.append(
                f"shmid {e['shmid']} key {e['key']} {human_bytes(e['bytes'])} "
                f"creator {e['creator_pid']}{' hugetlb' if e['hugetlb'] else ''}: {e['reason']}"
            )
        elif kind == "device":
            if "message" in e:
                lines.append(f"{e['device']}: {e['message']}")
                for h in e.get("holders", []):
                    mem = _mib(h["device_memory_mib"])
                    lines.append(f"  held by pid {h['pid']} {one_line(h['cmdline'], 40)} {mem}")
                lines.append(f"  unattributed {e['unattributed_mib']} MiB")
            else:
                lines.append(
                    f"{e['device']}: {e['unattributed_mib']} MiB of {e['used_mib']} MiB used "
                    f"by no listed process (baseline {e['baseline_mib']} MiB)"
                )
        elif kind == "hugepages":
            where = "host" if e["node"] is None else f"node{e['node']}"
            lines.append(
                f"{e['size']} {where}: {e['used_pct']}% used ({e['free']}/{e['total']} free)"
            )
        else:
            lines.append(str(e.get("detail") or e))
    return lines


def render_report(report: DoctorReport, width: int = 76, fix_width: int = 44) -> str:
    """One block of rows per check: summary then evidence lines, fix wrapped alongside."""
    rows: list[list[str]] = []
    for c in report.checks:
        left = textwrap.wrap(c.summary, width) or [""]
        for line in evidence_lines(c):
            left += textwrap.wrap(
                line, width, initial_indent="  ", subsequent_indent="    ", break_on_hyphens=False
            )
        right = textwrap.wrap(c.fix, fix_width, break_on_hyphens=False)
        for n in range(max(len(left), len(right))):
            rows.append(
                [
                    c.name if n == 0 else "",
                    c.status if n == 0 else "",
                    left[n] if n < len(left) else "",
                    right[n] if n < len(right) else "",
                ]
            )
    return render_table(["CHECK", "STATUS", "EVIDENCE", "FIX"], rows)


def doctor_main(args: argparse.Namespace) -> int:
    options = _options(args)
    host = host_from_args(args)
    report = run_checks(read_facts(host, options), options, tuple(args.check))
    if args.json:
        print_json(report.to_dict())
    else:
        print(render_report(report))
    return report.exit_code


# ---------------------------------------------------------------- clean


def _parse_owner(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise AccelhostError(f"--owner {text}: no such user") from None


def _parse_key(text: str) -> int:
    try:
        return int(text, 0) & 0xFFFFFFFF
    except ValueError:
        raise AccelhostError(f"--key {text}: not a number (0x1234abcd or decimal)") from None


def _describe_figures(fig: dict[str, Any]) -> str:
    pools = fig["hugepages_free"]
    huge = (
        "unknown"
        if pools is None
        else ", ".join(f"{s} {v['free']}/{v['total']}" for s, v in pools.items()) or "none"
    )
    dev = ", ".join(f"{d} {_mib(v)}" for d, v in fig["device_memory_free_mib"].items())
    if fig["segments"] is None:
        segs = "unknown"
    else:
        leaked = "?" if fig["leaked_segments"] is None else fig["leaked_segments"]
        segs = f"{fig['segments']} ({human_bytes(fig['segment_bytes'])}, {leaked} leaked)"
    orphans = "unknown" if fig["orphans"] is None else fig["orphans"]
    return (
        f"HugePages free {huge}; segments {segs}; orphans {orphans}; "
        f"device memory free {dev or 'no device source'}"
    )


def clean_main(args: argparse.Namespace) -> int:
    options = _options(args)
    if args.yes and args.snapshot:
        raise AccelhostError("clean --yes acts on this host; --snapshot only shows a plan")
    if args.grace < 0:
        raise AccelhostError("--grace must not be negative")
    host = host_from_args(args)
    filters = CleanFilters(
        pids=frozenset(args.pid),
        shmids=frozenset(args.shmid),
        owners=frozenset(_parse_owner(o) for o in args.owner),
        keys=frozenset(_parse_key(k) for k in args.key),
        orphans=args.only != "segments",
        segments=args.only != "orphans",
    )
    facts = read_facts(host, options)
    actions = plan_clean(facts, options, filters)
    before = figures(facts, options)
    out: dict[str, Any] = {
        "dry_run": not args.yes,
        "actions": [a.to_dict() for a in actions],
        "before": before,
    }
    quiet = bool(args.json)

    def say(line: str) -> None:
        if not quiet:
            print(line, flush=True)

    say(
        ("accelhost clean: " + ("doing" if args.yes else "dry run, nothing changes (--yes to act)"))
        + f": {len(actions)} action(s)"
    )
    _print_plan(actions, say, args.grace)
    say(f"before: {_describe_figures(before)}")
    status = 0
    if args.yes and actions:
        journal = Journal(args.journal)
        try:
            result = execute(actions, options, journal, grace_s=args.grace, say=say)
        finally:
            journal.close()
        after = figures(read_facts(host_from_args(args), options), options)
        out["outcomes"] = [o.to_dict() for o in result.outcomes]
        out["after"] = after
        out["journal"] = str(journal.path)
        say(f"after:  {_describe_figures(after)}")
        for o in result.outcomes:
            if not o.ok:
                say(f"not done: {o.target}: {o.result}")
        say(f"journal: {journal.path}")
        status = 0 if result.ok else 1
    if args.json:
        print_json(out)
    return status


def _print_plan(actions: Sequence[Action], say: Any, grace: float) -> None:
    for n, a in enumerate(actions, 1):
        say(f"  {n}. {a.describe()}")
        if a.kind == "stop":
            say(f"     SIGTERM, wait up to {grace:g} s, SIGKILL what is left, wait again")


# ---------------------------------------------------------------- watch


def _parse_addr(text: str) -> tuple[str, int] | None:
    if text == "none":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise AccelhostError(f"--metrics-addr {text}: expected HOST:PORT, like 127.0.0.1:9464")
    if int(port) > 65535:
        raise AccelhostError(f"--metrics-addr {text}: port {port} is not in 0-65535")
    return host.strip("[]"), int(port)


def watch_main(args: argparse.Namespace) -> int:
    from prometheus_client.exposition import start_http_server

    from accelhost.hygiene.watch import WatchConfig, Watcher, json_logger

    options = _options(args)
    if args.interval <= 0:
        raise AccelhostError("--interval must be positive")
    if args.auto_clean and args.snapshot:
        raise AccelhostError("--auto-clean acts on this host; it cannot run on a --snapshot")
    addr = _parse_addr(args.metrics_addr)
    config = WatchConfig(
        interval_s=args.interval,
        auto_clean=args.auto_clean,
        clean_leaked_bytes=args.clean_leaked_bytes,
        clean_orphan_rounds=max(1, args.clean_orphan_rounds),
        journal=args.journal,
        grace_s=args.grace,
    )
    log = json_logger()
    watcher = Watcher(lambda: host_from_args(args), options, config, log)
    server = None
    if addr is not None:
        try:
            server, _thread = start_http_server(addr[1], addr[0], registry=watcher.registry)
        except (OSError, OverflowError, UnicodeError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            raise AccelhostError(f"--metrics-addr {args.metrics_addr}: {why}") from None
        host_part, port_part = server.server_address[:2]
        shown = host_part.decode() if isinstance(host_part, bytes) else str(host_part)
        log({"event": "listening", "addr": f"{shown}:{port_part}", "path": "/metrics"})
    stop = threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _s, _f: stop.set())
    try:
        watcher.run(stop, args.rounds)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    log({"event": "stopped"})
    return 0


__all__ = ["register"]
