"""`accelhost bench pipeline`: the serial loop, the asyncio recipe and accelhost.pipeline
on identical work, in one run, so the numbers compare on a shared machine."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from accelhost.cli.common import print_json, render_table
from accelhost.errors import AccelhostError, UsageError

# the stages whose cost `bench pipeline` takes, each as --STAGE-time
STAGE_TIMES = ("pre", "device", "post")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("bench", help="measure how well the host feeds a device")
    sub = parser.add_subparsers(dest="bench_command", metavar="BENCH")
    p = sub.add_parser(
        "pipeline",
        help="serial loop vs asyncio recipe vs accelhost.pipeline on the same work",
        description="Run one workload three ways (serial loop, asyncio + ThreadPoolExecutor "
        "recipe, accelhost.pipeline) and compare items/s, device-busy fraction and "
        "efficiency = achieved / (1 / slowest stage).",
    )
    p.add_argument(
        "--pre-time", default="10ms", metavar="TIME", help="CPU time of preprocessing (GIL held)"
    )
    p.add_argument(
        "--device-time", default="50ms", metavar="TIME", help="device time (GIL released)"
    )
    p.add_argument(
        "--post-time", default="20ms", metavar="TIME", help="CPU time of postprocessing (GIL held)"
    )
    # the names of the last release, refused with a pointer: `--device` takes device ids
    # in every other command, so it cannot mean a duration here
    for old in STAGE_TIMES:
        p.add_argument(f"--{old}", dest=f"old_{old}", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--items",
        default=None,
        help="items per method (default 100, or 20000 when every stage costs nothing)",
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
    p.add_argument("--json", action="store_true", help="print JSON for machines")
    p.set_defaults(func=handle_pipeline)
    parser.set_defaults(func=lambda args: _usage(parser))
    from accelhost.benchbind.cli import register as register_bind

    register_bind(sub)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def handle_pipeline(args: argparse.Namespace) -> int:
    from accelhost.pipeline import bench

    costs = {}
    for stage in STAGE_TIMES:
        if getattr(args, f"old_{stage}") is not None:
            raise UsageError(f"--{stage} is now --{stage}-time (--device means device ids)")
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
        try:
            bench.check_writable(args.trace)
        except AccelhostError as exc:
            raise UsageError(str(exc)) from exc
    if args.real:
        wl = bench.real_workload(n)
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
    if args.trace:
        print(f"trace of the accelhost run: {args.trace} (open in https://ui.perfetto.dev)")
    return 0
