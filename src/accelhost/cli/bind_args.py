"""Options and argument handling shared by `bind`, `exec`, `verify` and `unbind`.

The options are defined once here and the values read back the same way for every command:
`--device` through `device_of` (one device; #12's identity lookup when it is left out),
`--thread-role` through the planner's one role parser, `--plan` or planning this host
through `load_plan`, and the applier's options through `bind_options`.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from accelhost.apply import DEFAULT_MIGRATE_BUDGET_MS, DEFAULT_STATE_DIR
from accelhost.apply.irqbalance import MODES as IRQBALANCE_MODES
from accelhost.cli.common import add_device_option, add_force_option, one_device, pci_from_args
from accelhost.cli.plan import add_device_type_option
from accelhost.errors import UsageError
from accelhost.planner.roles import ROLE_HELP, ROLE_METAVAR

if TYPE_CHECKING:
    from accelhost.apply.build import BindOptions
    from accelhost.apply.identity import Identified
    from accelhost.planner.roles import RoleSpec
    from accelhost.plans import Plan

HOST_ROOT_HELP = (
    "prefix of every /proc and /sys path of the IRQ and memory steps (node agents see the "
    "host at /host)"
)
STATE_HELP = f"where IRQ masks are saved for `unbind --irq` (default {DEFAULT_STATE_DIR})"


def plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plan",
        metavar="FILE",
        help="a plan from `accelhost plan --json` (or hand-written); default: plan this host now",
    )
    add_force_option(p)
    # Optional at parse time: a command that still needs it says so (`give --device`).
    add_device_option(
        p,
        "the device (the host's id, as plan keys are); bind and verify with --pid and "
        "without --device: the device the process holds open",
    )
    add_device_type_option(p, "accelerator family when planning (A2, A3, ...)")
    p.add_argument("--strategy", help="planning strategy when planning this host")
    p.add_argument(
        "--pci",
        metavar="ADDRS",
        help="when planning: these PCI devices (sysfs only), comma-separated",
    )
    p.add_argument(
        "--numa-from",
        choices=["numa_node", "local_cpulist"],
        default="numa_node",
        help="when planning PCI devices: where each device's NUMA node comes from",
    )
    p.add_argument(
        "--reserve-irq",
        type=int,
        default=0,
        metavar="K",
        help="when planning: reserve the first K CPUs of the pool for the device's IRQs",
    )


def irq_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host-root", metavar="DIR", default="/", help=HOST_ROOT_HELP)
    p.add_argument(
        "--irqbalance",
        choices=IRQBALANCE_MODES,
        default="stop",
        help="if irqbalance runs: stop it (default, as the reference; warns), ban the IRQ "
        "CPUs and IRQs in its configuration and restart it, or keep it as it is",
    )
    p.add_argument("--state-dir", metavar="DIR", default=None, help=STATE_HELP)


def device_glob_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device-glob",
        action="append",
        default=[],
        metavar="GLOB",
        help="without --device: also treat open files matching GLOB as device nodes, the "
        "number their name ends with being the device id (adds to /dev/davinciN, "
        "/dev/nvidiaN, /dev/accel/accelN, /dev/dri/renderD*)",
    )


def _budget_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected milliseconds, 0 or more, got {text!r}")
    return value


def migrate_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--migrate-budget-ms",
        type=_budget_ms,
        default=DEFAULT_MIGRATE_BUDGET_MS,
        metavar="MS",
        help="stop moving memory pages after this long, between two batches "
        f"(default {DEFAULT_MIGRATE_BUDGET_MS})",
    )


def role_option(p: argparse.ArgumentParser) -> None:
    # Parsed in the handler by the one role parser, so a bad spec is a UsageError (exit 2)
    # with the same words in every command.
    p.add_argument(
        "--thread-role",
        action="append",
        default=[],
        metavar=ROLE_METAVAR,
        help=ROLE_HELP,
    )


def thread_roles(args: argparse.Namespace) -> list[RoleSpec]:
    from accelhost.planner.roles import parse_role_spec

    return [parse_role_spec(text) for text in getattr(args, "thread_role", ())]


def device_of(args: argparse.Namespace, what: str) -> tuple[int, Identified | None]:
    """The one device the command applies to, and how it was found when it was not given;
    UsageError when none (or several) is given."""
    device = one_device(args, what)
    if (
        device is None
        and getattr(args, "pid", None) is not None
        and not getattr(args, "irq_only", False)
    ):
        # No --device: the device the process holds open (exit 2 for none or several).
        from accelhost.apply.identity import device_for_command

        found = device_for_command(args.pid, args.plan, args.device_glob)
        return found.device, found
    if device is None:
        raise UsageError(f"give --device N (the device whose plan to {what.split()[-1]})")
    return device, None


def load_plan(args: argparse.Namespace, device: int) -> Plan:
    """The plan from `--plan FILE`, else a plan of this host made now.

    Planning reads the host once (`read_once`): the warning about this process's CPUs and
    both planning attempts share every command and file, so npu-smi or nvidia-smi runs
    once per command even when the second attempt is needed.
    """
    from accelhost.plans import load_plan as load

    if args.plan:
        return load(args.plan)
    from accelhost.api import plan_for_device
    from accelhost.apply.traps import narrowed_warning
    from accelhost.host import read_once
    from accelhost.host.live import live_host

    kwargs: dict[str, Any] = {}
    if args.device_type:
        kwargs["device_type"] = args.device_type
    if args.strategy:
        kwargs["strategy"] = args.strategy
    if args.pci:
        kwargs["pci"] = pci_from_args(args)
    if args.numa_from != "numa_node":
        kwargs["numa_from"] = args.numa_from
    if args.reserve_irq:
        if args.reserve_irq < 0:
            raise UsageError("--reserve-irq must be 0 or more")
        kwargs["reserve_irq"] = args.reserve_irq
    host = read_once(live_host())
    warn(narrowed_warning("self", host))
    return plan_for_device(host, device, **kwargs)


def bind_options(args: argparse.Namespace, **kw: Any) -> BindOptions:
    from accelhost.apply.build import BindOptions

    return BindOptions(
        host_root=getattr(args, "host_root", "/") or "/",
        irqbalance=getattr(args, "irqbalance", "stop"),
        state_dir=getattr(args, "state_dir", None) or DEFAULT_STATE_DIR,
        allow_foreign=getattr(args, "force", False),
        **kw,
    )


def warn(lines: Any) -> None:
    for line in lines:
        print(f"accelhost: warning: {line}", file=sys.stderr)
