"""`accelhost plan`: the CPU plan of every visible accelerator, as a table or JSON."""

from __future__ import annotations

import argparse
import sys

from accelhost.cli.common import (
    add_json_option,
    add_snapshot_option,
    host_from_args,
    print_json,
    render_table,
)
from accelhost.cpulist import format_cpulist
from accelhost.errors import PlanError
from accelhost.plans import Plan


def add_plan_options(parser: argparse.ArgumentParser) -> None:
    """The options that shape a plan; shared with the commands that plan before binding."""
    add_snapshot_option(parser)
    parser.add_argument(
        "--device-type",
        metavar="TYPE",
        help="accelerator family: A2, A3, 310P, 950, nvidia or pci (default: detected)",
    )
    parser.add_argument(
        "--strategy",
        help="Ascend: global_slice, topo_affinity, cluster (default by family); "
        "GPU: exclusive (default), node, socket, core-complex",
    )
    parser.add_argument(
        "--devices",
        metavar="IDS",
        help="plan for these logical device ids (e.g. 0,1) instead of the ones an engine "
        "already runs on; use it before the engine starts",
    )
    parser.add_argument(
        "--pci", metavar="ADDRS", help="plan for these PCI devices (sysfs only), comma-separated"
    )
    parser.add_argument(
        "--numa-from",
        choices=["numa_node", "local_cpulist"],
        default="numa_node",
        help="where each device's NUMA node comes from: numa_node (sysfs; -1 means node 0, "
        "as torchrun) or local_cpulist (the node holding most of its local CPUs; use it for "
        "-1 nodes and GPUs on CPU-less memory nodes)",
    )
    parser.add_argument(
        "--reserve-irq",
        type=int,
        default=0,
        metavar="K",
        help="reserve the first K CPUs of each pool for the device's MSI-X IRQs",
    )
    parser.add_argument(
        "--thread-role",
        action="append",
        default=[],
        metavar="NAME=PATTERN:COUNT",
        help="pin threads whose name matches PATTERN to COUNT CPUs from the end of the pool "
        "(repeatable)",
    )


def plan_from_args(args: argparse.Namespace) -> Plan:
    from accelhost.api import plan

    devices = _ids(args.devices, "--devices") if args.devices else None
    pci = [p.strip() for p in args.pci.split(",") if p.strip()] if args.pci else None
    roles = []
    if args.thread_role:
        from accelhost.planner.roles import parse_thread_role

        roles = [parse_thread_role(text) for text in args.thread_role]
    if args.reserve_irq < 0:
        raise PlanError("--reserve-irq must be 0 or more")
    return plan(
        host_from_args(args),
        device_type=args.device_type,
        strategy=args.strategy,
        devices=devices,
        pci=pci,
        numa_from=args.numa_from,
        reserve_irq=args.reserve_irq,
        thread_roles=roles,
    )


def _ids(text: str, option: str) -> list[int]:
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise PlanError(f"{option} takes comma-separated integers, not {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise PlanError(f"{option} takes comma-separated non-negative integers, not {text!r}")
    return ids


def render_plan(plan: Plan) -> str:
    """The table people read: one row per device, CPU lists as ranges."""
    extra_roles = sorted({r.name for d in plan.devices for r in d.thread_roles})
    headers = ["device", "numa", "pool", "irq", "main", "acl", "release"]
    headers += extra_roles
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
            format_cpulist(dev.irq) or "-",
            format_cpulist(dev.main) or "-",
            format_cpulist(dev.acl) or "-",
            format_cpulist(dev.release) or "-",
        ]
        row += [roles.get(name, "-") for name in extra_roles]
        if show_pci:
            row.append(dev.pci or "-")
        rows.append(row)
    visible = format_cpulist(plan.visible) or "none"
    lines = [f"device type {plan.device_type}, mode {plan.mode}, devices {visible}", ""]
    lines.append(render_table(headers, rows))
    if plan.host_threads is not None:
        ht = plan.host_threads
        tids = ", ".join(map(str, ht.tids)) or "none found"
        lines.append("")
        lines.append(
            f"host threads {ht.pattern}: CPUs {format_cpulist(ht.cpus) or '-'} (tids: {tids})"
        )
    return "\n".join(lines)


def run_plan(args: argparse.Namespace) -> int:
    result = plan_from_args(args)
    if args.json:
        print_json(result.to_dict())
        return 0
    print(render_plan(result))
    for message in result.messages:
        print(f"note: {message}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser(
        "plan",
        help="the CPU plan of every visible accelerator",
        description="Compute the CPU pool of each visible accelerator and split it into roles "
        "(IRQ, main, ACL, release). On Ascend it equals vllm-ascend's CPU binding.",
    )
    add_plan_options(parser)
    add_json_option(parser)
    parser.set_defaults(func=run_plan)
