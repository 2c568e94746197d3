"""`accelhost doctor | clean | watch`: keep an accelerator host clean.

doctor's exit statuses (DOCTOR_DESCRIPTION) are the Node Problem Detector's contract.
"""

from __future__ import annotations

import argparse
import os
import pwd
import signal
import sys
import threading
from contextlib import closing

from accelhost.cli import options
from accelhost.cli.common import colour_wanted, command, fit, print_json, terminal_columns
from accelhost.cli.hygiene_options import add_common, add_preflight, hygiene_host, hygiene_options
from accelhost.errors import AccelhostError, UsageError
from accelhost.hygiene.capabilities import help_epilog
from accelhost.hygiene.report import CHECK_NAMES

DOCTOR_DESCRIPTION = (
    "Run the hygiene checks: orphan engines, device holders, device memory held by nothing, leaked "
    "shared memory (SysV and /dev/shm), HugePages, preflight, host tuning, engine containers whose "
    "stop would leak (container_init). Exit 0 healthy (OK/WARN), 1 a problem (FAIL), 2 could not "
    "tell (a check could not run, or a bad command line)."
)
WATCH_DESCRIPTION = (
    "Keep watching: log check changes as JSON lines, serve metrics, and with --auto-clean remove "
    "orphans and leaked shared memory past a threshold (never a tree whose engine frontend lives)."
)
CLEAN_DESCRIPTION = "Show what would be removed and why; with --yes, do it, journaled."


def build_doctor(doctor: argparse.ArgumentParser) -> None:
    command(doctor, doctor_main, DOCTOR_DESCRIPTION, help_epilog("doctor"))
    add_common(doctor)
    add_preflight(doctor)
    options.json_output(doctor)
    doctor.add_argument(
        "--check",
        action="append",
        default=[],
        choices=CHECK_NAMES,
        help="run only this check (repeatable)",
    )
    doctor.add_argument(
        "--brief",
        action="store_true",
        help="print one line (at most 80 characters): the verdict (OK, WARN, FAIL, UNKNOWN) "
        "and the worst finding; for the Node Problem Detector (with --json: the JSON, which "
        "carries that line as brief)",
    )


def build_clean(clean: argparse.ArgumentParser) -> None:
    command(clean, clean_main, CLEAN_DESCRIPTION, help_epilog("clean"))
    add_common(clean)
    options.json_output(clean)
    clean.add_argument("--yes", action="store_true", help="act (default: dry run)")
    options.grace(clean, "an orphan")
    options.journal(clean)
    clean.add_argument(
        "--only",
        choices=("orphans", "segments", "shm"),
        help="clean only orphans, only SysV segments, or only /dev/shm files",
    )
    options.pid(clean, "only this orphan", repeatable=True)
    clean.add_argument(
        "--shmid", type=int, action="append", default=[], help="only this segment (repeatable)"
    )
    clean.add_argument(
        "--path",
        action="append",
        default=[],
        metavar="FILE",
        help="only this shared-memory file (repeatable)",
    )
    clean.add_argument(
        "--owner",
        action="append",
        default=[],
        help="only segments and shared-memory files of this user or uid",
    )
    clean.add_argument(
        "--key", action="append", default=[], help="only segments with this key (0x... or decimal)"
    )


def build_watch(watch: argparse.ArgumentParser) -> None:
    command(watch, watch_main, WATCH_DESCRIPTION, help_epilog("watch"))
    add_common(watch)
    add_preflight(watch)
    watch.add_argument(
        "--interval",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between rounds of checks (default 30, at least 0.1)",
    )
    watch.add_argument(
        "--full-every",
        type=int,
        default=10,
        metavar="N",
        help="read the whole host every N rounds; the rounds between read only what "
        "changed (default 10, at least 1; 1 reads everything every round)",
    )
    watch.add_argument(
        "--metrics-addr",
        default="127.0.0.1:9464",
        metavar="HOST:PORT",
        help="where to serve /metrics (default 127.0.0.1:9464; port 0 picks one; "
        "'none' serves nothing)",
    )
    watch.add_argument(
        "--auto-clean",
        action="store_true",
        help="clean past the thresholds below; what it keeps (a segment no engine was seen "
        "making, a tree whose frontend lives) is logged once with the command that removes it",
    )
    watch.add_argument(
        "--clean-leaked-bytes",
        type=options.whole(0),
        default=1,
        metavar="BYTES",
        help="remove leaked shared memory once this many bytes are leaked (default 1: any): "
        "/dev/shm files of an engine's naming, and SysV segments this watch saw an engine "
        "make (never others)",
    )
    watch.add_argument(
        "--clean-orphan-rounds",
        type=options.whole(1),
        default=2,
        metavar="N",
        help="auto-clean an orphan seen in N consecutive rounds (default 2)",
    )
    options.grace(watch, "an orphan stopped by --auto-clean")
    options.journal(watch)
    watch.add_argument(
        "--rounds",
        type=options.whole(1),
        metavar="N",
        help="stop after N rounds (default: run until stopped)",
    )


# ---------------------------------------------------------------- doctor


def doctor_main(args: argparse.Namespace) -> int:
    from accelhost.hygiene.doctor.checks import run_checks
    from accelhost.hygiene.facts.host import read_facts

    options = hygiene_options(args)
    host = hygiene_host(args)
    try:
        facts = read_facts(host, options)
        report = run_checks(facts, options, tuple(args.check))  # --container: its own
    except UsageError:
        raise
    except AccelhostError as exc:
        # The doctor could not look: "could not tell" (2), never "a problem on the node" (1).
        if args.brief and not args.json:
            print(f"UNKNOWN {' '.join(str(exc).split())}"[:80])
        else:
            print(f"accelhost doctor: could not read the host: {exc}", file=sys.stderr)
        return 2
    if args.json:  # with --brief too: the JSON carries the brief line as "brief"
        print_json(report.to_dict())
    elif args.brief:
        print(report.brief())
    else:
        from accelhost.hygiene.render import render_report  # not for --brief: textwrap

        paint = _paint_status if colour_wanted(sys.stdout) else None
        print(render_report(report, terminal_columns(sys.stdout), paint))
    return report.exit_code


def _paint_status(column: int, cell: str) -> str:
    from accelhost.render import colour_status

    return colour_status(cell) if column == 1 else cell


# ---------------------------------------------------------------- clean


def _parse_owner(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise UsageError(f"--owner {text}: no such user") from None


def _parse_key(text: str) -> int:
    try:
        return int(text, 0) & 0xFFFFFFFF
    except ValueError:
        raise UsageError(f"--key {text}: not a number (0x1234abcd or decimal)") from None


def _check_named(args: argparse.Namespace) -> None:
    """A pid or shmid that cannot name anything is a usage error (2), not "not found" (1)."""
    for pid in args.pid:
        if pid <= 0:
            raise UsageError(f"--pid {pid}: not a process id (1 or more)")
    for shmid in args.shmid:
        if shmid < 0:
            raise UsageError(f"--shmid {shmid}: not a segment id (0 or more)")


def clean_main(args: argparse.Namespace) -> int:
    from accelhost.host.redact import redact_text, redact_values
    from accelhost.hygiene.clean.cleaner import CleanFilters, Journal, execute, figures, make_plan
    from accelhost.hygiene.facts.host import read_facts
    from accelhost.hygiene.judge.findings import find
    from accelhost.hygiene.render import describe_figures

    options = hygiene_options(args)
    if args.yes and args.snapshot:
        raise UsageError("clean --yes acts on this host; --snapshot only shows a plan")
    _check_named(args)
    if args.yes:
        _check_journal(args.journal)
    host = hygiene_host(args)
    named = bool(args.pid or args.shmid or args.path)
    filters = CleanFilters(
        pids=frozenset(args.pid),
        shmids=frozenset(args.shmid),
        owners=frozenset(_parse_owner(o) for o in args.owner),
        keys=frozenset(_parse_key(k) for k in args.key),
        paths=frozenset(os.path.abspath(p) for p in args.path),
        # --pid / --shmid / --path name exactly what to clean: kinds not named are left out
        orphans=args.only in (None, "orphans") and (not named or bool(args.pid)),
        segments=args.only in (None, "segments") and (not named or bool(args.shmid)),
        shm_files=args.only in (None, "shm") and (not named or bool(args.path)),
    )
    plan = make_plan(read_facts(host, options), options, filters)
    out = plan.to_dict(dry_run=not args.yes)
    columns = terminal_columns(sys.stdout)

    def say(line: str) -> None:
        if not args.json:  # redacted before it is cut to fit: a secret is never half shown
            print("\n".join(fit(redact_text(line), columns)), flush=True)

    mode = "doing" if args.yes else "dry run, nothing changes (--yes to act)"
    say(f"accelhost clean: {mode}: {len(plan.actions)} action(s)")
    for line in plan.lines(args.grace):
        say(line)
    say(f"before: {describe_figures(plan.before)}")
    for u in plan.unmatched:
        print(f"accelhost clean: cannot act on {u.line}", file=sys.stderr)
    if plan.doubtful:
        print(
            f"accelhost clean: kept {plan.doubtful} leftover(s) that {options.container} may have "
            "left, but not for sure alone (left by: possibly, or another container too); "
            "without --container, `accelhost clean` judges them for the whole host",
            file=sys.stderr,
        )
    status = 1 if plan.unmatched else 0
    if args.yes and plan.actions:
        with closing(Journal(args.journal)) as journal:
            result = execute(plan.actions, options, journal, grace_s=args.grace, say=say)
        after = figures(find(read_facts(hygiene_host(args), options), options))
        out["outcomes"] = [o.to_dict() for o in result.outcomes]
        out["after"] = after
        out["journal"] = str(journal.path)
        say(f"after:  {describe_figures(after)}")
        for o in result.outcomes:
            if not o.ok:
                say(f"not done: {o.target}: {o.result}")
        say(f"journal: {journal.path}")
        status = 0 if result.ok and not plan.unmatched else 1
    if args.json:
        print_json(redact_values(out))
    return status


def _check_journal(path: str) -> None:
    """A --journal FILE goes in a directory that exists: a typo must not create directories
    as root (only the default's, /var/log/accelhost, is made when missing)."""
    from accelhost.hygiene.clean.journal import DEFAULT_JOURNAL

    folder = os.path.dirname(os.path.abspath(path))
    if path != DEFAULT_JOURNAL and not os.path.isdir(folder):
        raise UsageError(f"--journal {path}: there is no directory {folder}")


# ---------------------------------------------------------------- watch


def _parse_addr(text: str) -> tuple[str, int] | None:
    if text == "none":
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise UsageError(f"--metrics-addr {text}: expected HOST:PORT, like 127.0.0.1:9464")
    if int(port) > 65535:
        raise UsageError(f"--metrics-addr {text}: port {port} is not in 0-65535")
    return host.strip("[]"), int(port)


def watch_main(args: argparse.Namespace) -> int:
    from accelhost.hygiene.watch.metrics import MetricsServer
    from accelhost.hygiene.watch.watcher import WatchConfig, Watcher, json_logger

    options = hygiene_options(args)
    if not args.interval >= 0.1:  # NaN too
        raise UsageError("--interval must be at least 0.1 seconds")
    if args.full_every < 1:
        raise UsageError("--full-every must be at least 1")
    if args.auto_clean and args.snapshot:
        raise UsageError("--auto-clean acts on this host; it cannot run on a --snapshot")
    if args.auto_clean:
        _check_journal(args.journal)
    addr = _parse_addr(args.metrics_addr)
    config = WatchConfig(
        interval_s=args.interval,
        auto_clean=args.auto_clean,
        clean_leaked_bytes=args.clean_leaked_bytes,
        clean_orphan_rounds=args.clean_orphan_rounds,
        journal=args.journal,
        grace_s=args.grace,
        full_every=args.full_every,
    )
    log = json_logger()
    hygiene_host(args)  # a snapshot that cannot be read is a usage error, before serving anything
    watcher = Watcher(lambda: hygiene_host(args), options, config, log)
    server = None
    if addr is not None:
        try:
            server = MetricsServer(addr[0], addr[1], watcher.registry)
            threading.Thread(target=server.serve_forever, daemon=True).start()
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
        # nothing to reopen (the journal is opened for each clean): a HUP from logrotate
        # must not end the watch and what it remembers (a handler, not SIG_IGN, which
        # the tools it runs would inherit)
        signal.signal(signal.SIGHUP, lambda _s, _f: None)
    try:
        watcher.run(stop, args.rounds)
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    log({"event": "stopped"})
    return 0
