"""`accelhost bench bind`: the command line of the bind A/B (options here, work elsewhere)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from accelhost.cli.common import add_device_option, add_grace_option, one_device, print_json
from accelhost.errors import ParseError, UsageError

MAX_REPEATS = 10_000  # the order is a list made up front, and the bootstrap is O(R)
USAGE_EXAMPLE = "accelhost bench bind --cpus 2-7 -- python3 my_benchmark.py"
EPILOG = (
    "The bound arm is bound as `accelhost exec` binds (its CPU affinity and memory policy "
    "steps, run in the child before it execs; no IRQ steps). Progress: one line per run on "
    "standard error (redrawn in place on a terminal). Exit status: 0 measured (whatever the "
    "verdict), 1 an arm has no figure or the binding failed, 2 bad usage, 130 Ctrl-C (143 "
    "SIGTERM): the running command is stopped and the runs so far are reported."
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "bind",
        help="A/B a command unbound and bound: does the binding help this workload?",
        description="Run COMMAND alternately unbound and bound, R times each after K "
        "warm-up rounds, and compare the medians of its figure (wall time, or a number it "
        "prints) with a bootstrap confidence interval and a verdict.",
        epilog=EPILOG,
    )
    p.add_argument("--plan", metavar="FILE", help="bind as this plan binds --device N")
    add_device_option(p, "with --plan: the device whose CPUs and memory node to use")
    p.add_argument("--cpus", metavar="LIST", help="bind to these CPUs instead of a plan's")
    p.add_argument("--repeats", type=int, default=10, metavar="R", help="runs per arm (10)")
    p.add_argument("--warmup", type=int, default=1, metavar="K", help="uncounted rounds first (1)")
    p.add_argument(
        "--metric",
        metavar="REGEX",
        help="the figure is the first group of REGEX in COMMAND's standard output "
        "(default: the wall time of the run)",
    )
    p.add_argument(
        "--higher-is-better",
        action="store_true",
        help="the figure is a throughput (default: lower is better, as for times)",
    )
    p.add_argument("--membind", action="store_true", help="with --plan: as `exec --membind`")
    p.add_argument("--no-memory", action="store_true", help="with --plan: as `exec --no-memory`")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (0)")
    add_grace_option(p, "a run stopped by Ctrl-C")
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARG...]")
    p.set_defaults(func=cmd_bench_bind)


def _check(args: argparse.Namespace) -> tuple[list[str], re.Pattern[str] | None]:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError(f"no command to measure: {USAGE_EXAMPLE}")
    if args.cpus is not None and (args.plan is not None or args.device is not None):
        raise UsageError("--cpus and --plan/--device exclude each other: bind one way")
    if args.plan is not None and args.device is None:
        raise UsageError("--plan needs --device N: the device whose binding to measure")
    if args.device is not None and args.plan is None:
        raise UsageError("--device needs --plan FILE (write one with `accelhost plan --json`)")
    if args.cpus is None and args.plan is None:
        raise UsageError("say how to bind the bound arm: --cpus LIST or --plan FILE --device N")
    if args.cpus is not None and (args.membind or args.no_memory):
        raise UsageError("--membind and --no-memory go with --plan (--cpus binds CPUs only)")
    if not 1 <= args.repeats <= MAX_REPEATS:
        raise UsageError(f"--repeats must be 1 to {MAX_REPEATS}, got {args.repeats}")
    if not 0 <= args.warmup <= MAX_REPEATS:
        raise UsageError(f"--warmup must be 0 to {MAX_REPEATS}, got {args.warmup}")
    if args.grace < 0:
        raise UsageError(f"--grace must be 0 or more, got {args.grace:g}")
    metric = None
    if args.metric is not None:
        try:
            metric = re.compile(args.metric)
        except re.error as exc:
            raise UsageError(
                f"--metric {args.metric!r} is not a regular expression: {exc}"
            ) from None
        if metric.groups < 1:
            raise UsageError(
                f"--metric {args.metric!r} has no group: put the number in one, "
                "e.g. 'TPOT: ([0-9.]+)'"
            )
    return argv, metric


def cmd_bench_bind(args: argparse.Namespace) -> int:
    argv, metric = _check(args)
    from accelhost.benchbind import binding as bindmod

    if args.cpus is not None:
        from accelhost.cpulist import parse_cpulist

        try:
            cpus = parse_cpulist(args.cpus, "--cpus")
        except ParseError as exc:
            raise UsageError(str(exc)) from None
        if not cpus:
            raise UsageError("--cpus names no CPU")
        bound = bindmod.from_cpus(cpus)
    else:
        device = one_device(args, "bench bind")
        assert device is not None
        bound = bindmod.from_plan(
            args.plan, device, memory=not args.no_memory, membind=args.membind
        )
    return _measure(args, argv, metric, bound)


def _measure(
    args: argparse.Namespace, argv: list[str], metric: re.Pattern[str] | None, bound: Any
) -> int:
    import socket

    from accelhost.benchbind import report
    from accelhost.benchbind.runner import (
        BOUND,
        UNBOUND,
        BindingError,
        Figure,
        run_all,
        schedule,
    )
    from accelhost.benchbind.stats import compare
    from accelhost.errors import ApplyError

    few = report.repeats_warning(args.repeats)
    for line in [*bound.warnings, *([few] if few else [])]:
        print(f"accelhost: warning: {line}", file=sys.stderr)
    figure = Figure(metric)
    slots = schedule(args.repeats, args.warmup)
    progress = report.Progress(len(slots))
    try:
        outcome = run_all(argv, bound, figure, slots, grace=args.grace, on_run=progress)
    except BindingError as exc:
        raise ApplyError(f"cannot bind the bound arm: {exc}") from None
    finally:
        progress.done()
    comparison = compare(
        outcome.values(UNBOUND),
        outcome.values(BOUND),
        higher_is_better=args.higher_is_better,
        seed=args.seed,
    )
    setup = report.Setup(
        tuple(argv),
        bound,
        figure,
        args.repeats,
        args.warmup,
        socket.gethostname(),
        tuple(sorted(os.sched_getaffinity(0))),
    )
    if args.json:
        print_json(report.to_dict(setup, outcome, comparison))
    else:
        print(report.text(setup, outcome, comparison))
    if outcome.stopped_by is not None:
        print("accelhost: interrupted: the report covers the runs finished so far", file=sys.stderr)
        return 128 + outcome.stopped_by
    if outcome.gave_up is not None:
        print(f"accelhost: bench bind: stopped early: {outcome.gave_up}", file=sys.stderr)
        return 1
    if not comparison.unbound.runs or not comparison.bound.runs:
        print("accelhost: an arm has no figure: see the failed runs", file=sys.stderr)
        return 1
    return 0
