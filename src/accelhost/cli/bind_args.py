"""Option groups and argument handling shared by `bind`, `exec`, `verify` and `unbind`:
the options of `options` grouped as the bind family takes them, and their values read back
the same way for every command."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from accelhost.apply import DEFAULT_STATE_DIR, IRQBALANCE_MODES
from accelhost.cli import options
from accelhost.cli.common import one_device, planning_kwargs, warn
from accelhost.errors import UsageError

if TYPE_CHECKING:
    from accelhost.apply.build import BindOptions
    from accelhost.apply.identity import Identified
    from accelhost.plans import Plan


def plan_options(p: argparse.ArgumentParser, verb: str, device: str) -> None:
    """--plan, --device, and how to plan this host when no --plan is given, in the
    command's own words: `verb` is what it does with the plan ("apply", "check against"),
    `device` what --device means to it."""
    options.plan_file(p, f"the plan to {verb} (default: plan this host now)")
    options.force(p, verb)
    # Optional at parse time: a command that still needs it says so (`give --device`).
    options.device(p, device, one=True)
    planning = p.add_argument_group("planning this host (without --plan)")
    options.device_type(planning)
    options.planning(planning)


def irq_options(p: argparse.ArgumentParser) -> None:
    options.host_root(p)
    p.add_argument(
        "--irqbalance",
        choices=IRQBALANCE_MODES,
        default="stop",
        help="if irqbalance runs: stop it (default, as the reference; warns), ban the IRQ "
        "CPUs and IRQs in its configuration and restart it, or keep it as it is",
    )
    options.state_dir(p)


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

    kwargs = planning_kwargs(args)
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
