"""`accelhost plan`: the CPU plan of every visible accelerator, as a table or JSON."""

from __future__ import annotations

import argparse
import sys

from accelhost.cli import options
from accelhost.cli.common import (
    command,
    host_from_args,
    planning_kwargs,
    print_json,
    terminal_columns,
    thread_roles,
)
from accelhost.cpulist import format_cpulist
from accelhost.plans import Plan
from accelhost.render import render_table

DESCRIPTION = (
    "Compute the CPU pool of each visible accelerator and split it into roles (IRQ, main, ACL, "
    "release). On Ascend it equals vllm-ascend's CPU binding (v0.23.0 to v0.26.0rc)."
)


def render_plan(plan: Plan, columns: int | None = None) -> str:
    """The table people read: one row per device, CPU lists as ranges; within `columns`
    when given (a terminal's width)."""
    extra_roles = sorted({r.name for d in plan.devices for r in d.thread_roles})
    headers = ["device", "numa", "pool", "irq", "main", "acl", "release", *extra_roles]
    show_pci = any(d.pci for d in plan.devices)
    if show_pci:
        headers.append("pci")
    rows = []
    for dev in plan.devices:
        roles = {r.name: format_cpulist(r.cpus) for r in dev.thread_roles}
        row = [
            dev.device,
            "-" if dev.numa_node is None else dev.numa_node,
            format_cpulist(dev.pool),
            *(format_cpulist(cpus) or "-" for cpus in (dev.irq, dev.main, dev.acl, dev.release)),
        ]
        row += [roles.get(name, "-") for name in extra_roles]
        if show_pci:
            row.append(dev.pci or "-")
        rows.append(row)
    visible = format_cpulist(plan.visible) or "none"
    lines = [f"device type {plan.device_type}, mode {plan.mode}, devices {visible}", ""]
    if rows or plan.worker_skipped is None:
        lines.append(render_table(headers, rows, columns=columns))
    if plan.worker_skipped is not None:
        lines.append(f"worker CPU binding skipped: {plan.worker_skipped}")
    if (ht := plan.host_threads) is not None:
        tids = ", ".join(map(str, ht.tids)) or "none found"
        cpus = format_cpulist(ht.cpus) or "-"
        lines += ["", f"host threads {ht.pattern}: CPUs {cpus} (tids: {tids})"]
    return "\n".join(lines)


def run_plan(args: argparse.Namespace) -> int:
    from accelhost.api import plan

    host, roles = host_from_args(args), thread_roles(args)  # in the order they fail
    result = plan(host, devices=args.device, thread_roles=roles, **planning_kwargs(args))
    if args.json:
        print_json(result.to_dict())
        return 0
    print(render_plan(result, terminal_columns(sys.stdout)))
    for message in result.messages:
        print(f"note: {message}", file=sys.stderr)
    return 0


def build_plan(parser: argparse.ArgumentParser) -> None:
    command(parser, run_plan, DESCRIPTION)
    options.snapshot(parser)
    options.device_type(parser)
    options.device(
        parser,
        "plan for these devices instead of the ones an engine already runs on; use it "
        "before the engine starts",
    )
    options.planning(parser)
    options.thread_role(parser)
    options.json_output(parser)
