"""`accelhost bench pipeline | bind`: the two A/B tools' options and reports (their work is
in `accelhost.bench`).

`bench pipeline` runs the serial loop, the asyncio recipe and accelhost.pipeline on
identical work, in one run, so the numbers compare on a shared machine; `bench bind` runs a
command alternately unbound and bound and says whether the binding helps.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from accelhost.cli import options
from accelhost.cli.common import command, command_after_dashes, one_device, print_json, warn
from accelhost.errors import ApplyError, ParseError, UsageError
from accelhost.render import render_table

# the stages whose cost `bench pipeline` takes, each as --STAGE-time: its default, and what
STAGES = {
    "pre": ("10ms", "CPU time of preprocessing (GIL held)"),
    "device": ("50ms", "device time (GIL released)"),
    "post": ("20ms", "CPU time of postprocessing (GIL held)"),
}


def build_bench(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Measure before you trust: `bench pipeline` runs one workload as a "
        "serial loop, as the asyncio recipe and through accelhost.pipeline and compares "
        "their throughput; `bench bind` runs a command unbound and bound, in turns, and "
        "says whether the binding helps it on this host."
    )
    sub = parser.add_subparsers(dest="bench_command", metavar="BENCH")
    p = sub.add_parser(
        "pipeline",
        help="serial loop vs asyncio recipe vs accelhost.pipeline on the same work",
        description="Run one workload three ways (serial loop, asyncio + ThreadPoolExecutor "
        "recipe, accelhost.pipeline) and compare items/s, device-busy fraction and "
        "efficiency = achieved / (1 / slowest stage).",
    )
    for stage, (default, what) in STAGES.items():
        p.add_argument(
            f"--{stage}-time",
            default=default,
            metavar="TIME",
            help=f"{what}, like 10ms, 0.5s, 250us; a bare number is milliseconds "
            f"(default {default})",
        )
    p.add_argument(
        "--items", help="items per method (default 100, or 20000 when every stage costs nothing)"
    )
    p.add_argument(
        "--real",
        action="store_true",
        help="a real tokenizer and a small torch model instead of simulated stages",
    )
    p.add_argument(
        "--cpu-kind",
        choices=("thread", "process"),
        default="thread",
        help="how accelhost runs the pre/post stages (default: thread, like the recipe)",
    )
    p.add_argument("--trace", metavar="FILE", help="write the accelhost run as a Chrome trace")
    options.json_output(p)
    p.set_defaults(func=handle_pipeline)
    parser.set_defaults(func=lambda args: _usage(parser))
    register_bind(sub)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def handle_pipeline(args: argparse.Namespace) -> int:
    from accelhost.bench import pipeline as bench

    costs = {}
    for stage in STAGES:
        try:
            costs[stage] = bench.parse_duration(getattr(args, f"{stage}_time"))
        except ValueError as exc:
            raise UsageError(f"--{stage}-time: {exc}") from exc
    if args.items is None:
        n = 20000 if not any(costs.values()) and not args.real else 100
    else:
        try:
            n = int(args.items)
        except ValueError:
            raise UsageError(f"--items: {args.items!r} is not a whole number") from None
        if n < 1:
            raise UsageError("--items: must be at least 1")
    if args.real and args.cpu_kind == "process":
        raise UsageError(
            "--cpu-kind process does not combine with --real (its stages hold a model)"
        )
    if args.trace is not None:
        bench.check_writable(args.trace)
    if args.real:
        from accelhost.bench.realwork import real_workload

        wl = real_workload(n)
    else:
        wl = bench.simulated(costs["pre"], costs["device"], costs["post"], n)
    progress = bench.Progress(n)  # one bar per method, redrawn from zero
    report = bench.bench(wl, progress, trace=args.trace, cpu_kind=args.cpu_kind)
    if args.json:
        print_json(bench.document(wl, report, args.cpu_kind))
        return 0
    where = "threads" if args.cpu_kind == "thread" else "processes"
    print(f"workload: {wl.label}; {n} items per method; accelhost pre/post in {where}")
    print(render_table(bench.TABLE_HEADERS, bench.table_rows(report)))
    for note in bench.efficiency_notes(wl, report):
        print(f"note: {note}")
    if args.trace:
        print(f"trace of the accelhost run: {args.trace} (open in https://ui.perfetto.dev)")
    return 0


# ---------------------------------------------------------------- bench bind

BIND_HELP = "A/B a command unbound and bound: does the binding help this workload?"
BIND_DESCRIPTION = (
    "Run COMMAND alternately unbound and bound, R times each after K "
    "warm-up rounds, and compare the medians of its figure (wall time, or a number it "
    "prints) with a bootstrap confidence interval and a verdict."
)
MAX_REPEATS = 10_000  # the order is a list made up front, and the bootstrap is O(R)
USAGE_EXAMPLE = "accelhost bench bind --cpus 2-7 -- python3 my_benchmark.py"
EPILOG = (
    "The bound arm is bound as `accelhost exec` binds (its CPU affinity and memory policy "
    "steps, run in the child before it execs; no IRQ steps). Progress: one line per run on "
    "standard error (redrawn in place on a terminal). Exit status: 0 measured (whatever the "
    "verdict), 1 an arm has no figure, the runs stopped early (no run can start, or no "
    "figure from the first 2 rounds) or the binding failed, 2 bad usage, 130 Ctrl-C (143 "
    "SIGTERM): the running command is stopped and the runs so far are reported."
)


def register_bind(sub: Any) -> None:
    p = sub.add_parser("bind", help=BIND_HELP)
    command(p, cmd_bench_bind, BIND_DESCRIPTION, EPILOG)
    options.plan_file(p, "bind as this plan binds --device N")
    options.device(p, "with --plan: the device whose CPUs and memory node to use", one=True)
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
    options.membind(p)
    options.no_memory(p, "the bound arm sets no memory policy")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (0)")
    options.grace(p, "a run stopped by Ctrl-C")
    options.json_output(p)
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARG...]")


def _check(args: argparse.Namespace) -> tuple[list[str], re.Pattern[str] | None]:
    argv = command_after_dashes(args.argv, f"no command to measure: {USAGE_EXAMPLE}")
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
    from accelhost.bench import bind_exec as bindmod

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
    import socket

    from accelhost.bench import bind_report as report
    from accelhost.bench import bind_runner as runner
    from accelhost.bench.bind_stats import compare

    few = report.repeats_warning(args.repeats)
    warn([*bound.warnings, *([few] if few else [])])
    figure = runner.Figure(metric)
    slots = runner.schedule(args.repeats, args.warmup)
    progress = report.Progress(len(slots))
    try:
        outcome = runner.run_all(argv, bound, figure, slots, grace=args.grace, on_run=progress)
    except runner.BindingError as exc:
        raise ApplyError(f"cannot bind the bound arm: {exc}") from None
    finally:
        progress.done()
    comparison = compare(
        outcome.values(runner.UNBOUND),
        outcome.values(runner.BOUND),
        higher_is_better=args.higher_is_better,
        seed=args.seed,
    )
    affinity = tuple(sorted(os.sched_getaffinity(0)))
    setup = report.Setup(
        tuple(argv), bound, figure, args.repeats, args.warmup, socket.gethostname(), affinity
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
