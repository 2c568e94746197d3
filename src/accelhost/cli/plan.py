"""`accelhost plan`: the CPU plan of every visible accelerator, as a table or JSON."""

from __future__ import annotations

import argparse
import sys

from accelhost.cli.common import (
    add_device_option,
    add_json_option,
    add_snapshot_option,
    host_from_args,
    pci_from_args,
    print_json,
    render_table,
)
from accelhost.cpulist import format_cpulist
from accelhost.errors import UsageError
from accelhost.family import FAMILIES, normalize_family
from accelhost.plans import Plan


def device_type_arg(text: str) -> str:
    """argparse type for --device-type: a family name in any case; a usage error otherwise."""
    from accelhost.errors import PlanError

    try:
        return normalize_family(text)
    except PlanError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


def add_device_type_option(parser: argparse.ArgumentParser, help: str) -> None:
    parser.add_argument("--device-type", metavar="TYPE", type=device_type_arg, help=help)


def add_plan_options(parser: argparse.ArgumentParser) -> None:
    """The options that shape a plan; shared with the commands that plan before binding."""
    add_snapshot_option(parser)
    add_device_type_option(parser, f"accelerator family: {', '.join(FAMILIES)} (default: detected)")
    parser.add_argument(
        "--strategy",
        help="Ascend: global_slice, topo_affinity, cluster (default by family); "
        "GPU: exclusive (default), node, socket, core-complex",
    )
    add_device_option(
        parser,
        "plan for these logical device ids (e.g. 0-3,5) instead of the ones an engine "
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

    pci = pci_from_args(args)
    roles = []
    if args.thread_role:
        from accelhost.planner.roles import parse_role_spec

        roles = [parse_role_spec(text) for text in args.thread_role]
    if args.reserve_irq < 0:
        raise UsageError("--reserve-irq must be 0 or more")
    return plan(
        host_from_args(args),
        device_type=args.device_type,
        strategy=args.strategy,
        devices=args.device,
        pci=pci,
        numa_from=args.numa_from,
        reserve_irq=args.reserve_irq,
        thread_roles=roles,
    )


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
