"""`accelhost bind | exec | verify | unbind`: apply a plan to this machine, check it, undo it.

Every command builds its list of steps first; `--dry-run` prints that list and changes
nothing. Exit status: 0 all steps succeeded, 2 some failed (partial), 1 nothing could be
done or a user's mistake (one line on standard error, never a traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from accelhost.cli.common import add_device_option, add_json_option, one_device, print_json
from accelhost.errors import ApplyError, PlanError, UsageError
from accelhost.planner.roles import ROLE_HELP, ROLE_METAVAR

if TYPE_CHECKING:
    from accelhost.apply.build import BindOptions
    from accelhost.apply.steps import ApplyReport
    from accelhost.planner.roles import RoleSpec
    from accelhost.plans import Plan

EPILOG = (
    "exit status: 0 every step succeeded, 2 some steps failed (partial) or a usage error, "
    "1 nothing applied (a bad plan file, an unknown device, a process that is gone)"
)


def register(sub: Any) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    bind = sub.add_parser(
        "bind",
        help="bind a running worker to its device's CPUs, memory node and IRQs",
        description="Pin every thread of a process to the plan's CPUs for one device (ACL "
        "and release threads to their own CPUs), move its memory to the device's NUMA node "
        "and the device's IRQs onto the reserved IRQ CPUs.",
        epilog=EPILOG,
        formatter_class=fmt,
    )
    _plan_options(bind)
    bind.add_argument("--pid", type=int, help="the worker process (required unless --irq-only)")
    bind.add_argument("--dry-run", action="store_true", help="print the steps, change nothing")
    bind.add_argument("--irq-only", action="store_true", help="run only the IRQ step")
    bind.add_argument("--no-irq", action="store_true", help="leave IRQs alone")
    bind.add_argument("--no-memory", action="store_true", help="do not move memory pages")
    _migrate_option(bind)
    _device_glob_option(bind)
    _irq_options(bind)
    _role_option(bind)
    add_json_option(bind)
    bind.set_defaults(func=cmd_bind)

    ex = sub.add_parser(
        "exec",
        help="start a command already bound to a device's CPUs and NUMA node",
        description="Set this process's CPUs and memory policy, bind the device's IRQs, then "
        "replace it with COMMAND, which is bound from its first instruction. Threads created "
        "later (ACL, release) inherit the main CPUs; re-pin them from the worker with "
        "accelhost.bind_current_process() or with `accelhost bind`.",
        epilog=EPILOG,
        formatter_class=fmt,
    )
    _plan_options(ex)
    ex.add_argument("--dry-run", action="store_true", help="print the steps, run nothing")
    ex.add_argument("--no-irq", action="store_true", help="leave IRQs alone")
    ex.add_argument("--no-memory", action="store_true", help="leave the memory policy alone")
    ex.add_argument(
        "--membind",
        action="store_true",
        help="strict: allocate only on the device's node (default: prefer it)",
    )
    _irq_options(ex)
    _role_option(ex)
    add_json_option(ex)
    ex.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    ex.set_defaults(func=cmd_exec)

    ver = sub.add_parser(
        "verify",
        help="check that a worker's threads and the device IRQs still match the plan",
        description="Compare every thread's affinity and the device's IRQ masks with the "
        "plan, and show where the process's memory lives. Exit 0 when all match, 1 with one "
        "line per thread or IRQ that drifted.",
        formatter_class=fmt,
    )
    _plan_options(ver)
    ver.add_argument("--pid", type=int, help="the worker process (omit to check IRQs only)")
    ver.add_argument("--no-irq", action="store_true", help="do not check IRQ masks")
    ver.add_argument("--host-root", metavar="DIR", default="/", help=HOST_ROOT_HELP)
    _device_glob_option(ver)
    _role_option(ver)
    add_json_option(ver)
    ver.set_defaults(func=cmd_verify)

    un = sub.add_parser(
        "unbind",
        help="restore IRQ masks saved at bind time, or free a process's threads",
        description="--irq puts back the IRQ masks (and irqbalance) as they were before "
        "`bind`; --pid gives every thread of a process its whole cpuset again.",
        epilog=EPILOG,
        formatter_class=fmt,
    )
    un.add_argument("--irq", action="store_true", help="restore the saved IRQ masks")
    un.add_argument("--pid", type=int, help="give this process's threads all allowed CPUs")
    add_device_option(un, "with --irq: only this device's IRQs")
    un.add_argument("--host-root", metavar="DIR", help="with --irq: only IRQs saved under DIR")
    un.add_argument("--state-dir", metavar="DIR", default=None, help=STATE_HELP)
    un.add_argument("--dry-run", action="store_true", help="print the steps, change nothing")
    add_json_option(un)
    un.set_defaults(func=cmd_unbind)


HOST_ROOT_HELP = (
    "prefix of every /proc and /sys path of the IRQ and memory steps (node agents see the "
    "host at /host)"
)
STATE_HELP = "where IRQ masks are saved for `unbind --irq` (default /var/lib/accelhost)"


def _plan_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plan",
        metavar="FILE",
        help="a plan from `accelhost plan --json` (or hand-written); default: plan this host now",
    )
    # Optional at parse time: a command that still needs it says so (`give --device`).
    add_device_option(p, "the device (the host's id, as plan keys are)")
    p.add_argument("--device-type", help="accelerator family when planning (A2, A3, ...)")
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


def _irq_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host-root", metavar="DIR", default="/", help=HOST_ROOT_HELP)
    p.add_argument(
        "--irqbalance",
        choices=("stop", "ban", "keep"),
        default="stop",
        help="if irqbalance runs: stop it (default, as the reference; warns), ban the IRQ "
        "CPUs and IRQs in its configuration and restart it, or keep it as it is",
    )
    p.add_argument("--state-dir", metavar="DIR", default=None, help=STATE_HELP)


def _device_glob_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device-glob",
        action="append",
        default=[],
        metavar="GLOB",
        help="without --device: also treat open files matching GLOB as device nodes, the "
        "number their name ends with being the device id (adds to /dev/davinciN, "
        "/dev/nvidiaN, /dev/accel/accelN, /dev/dri/renderD*)",
    )


def _migrate_option(p: argparse.ArgumentParser) -> None:
    from accelhost.apply.migrate import DEFAULT_BUDGET_MS

    p.add_argument(
        "--migrate-budget-ms",
        type=int,
        default=DEFAULT_BUDGET_MS,
        metavar="MS",
        help="stop moving memory pages after this long, between two batches "
        f"(default {DEFAULT_BUDGET_MS})",
    )


def _role_option(p: argparse.ArgumentParser) -> None:
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


def device_of(args: argparse.Namespace, what: str) -> int:
    """The one device the command applies to; UsageError when none (or several) is given."""
    device = one_device(args, what)
    if (
        device is None
        and getattr(args, "pid", None) is not None
        and not getattr(args, "irq_only", False)
    ):
        # No --device: the device the process holds open (exit 2 for none or several).
        from accelhost.apply.identity import device_for_command

        found = device_for_command(args.pid, args.plan, args.device_glob)
        args.device_found = found.to_dict()
        return found.device
    if device is None:
        raise UsageError(f"give --device N (the device whose plan to {what.split()[-1]})")
    return device


def load_plan(args: argparse.Namespace, device: int) -> Plan:
    from accelhost.apply.worker import load_plan as load

    if args.plan:
        return load(args.plan)
    try:
        from accelhost.api import plan as make_plan
    except ImportError:
        raise ApplyError("no planner in this installation: pass --plan FILE") from None
    from accelhost.apply.traps import narrowed_warning
    from accelhost.host.live import LiveHost

    _warn(narrowed_warning(os.getpid()))
    kwargs: dict[str, Any] = {}
    if args.device_type:
        kwargs["device_type"] = args.device_type
    if args.strategy:
        kwargs["strategy"] = args.strategy
    if args.pci:
        kwargs["pci"] = [a.strip() for a in args.pci.split(",") if a.strip()]
    if args.numa_from != "numa_node":
        kwargs["numa_from"] = args.numa_from
    if args.reserve_irq:
        if args.reserve_irq < 0:
            raise UsageError("--reserve-irq must be 0 or more")
        kwargs["reserve_irq"] = args.reserve_irq
    host = LiveHost()
    try:
        plan = make_plan(host, **kwargs)
        plan.device(device)
        return plan
    except PlanError:
        # No engine runs on the device yet (`exec`, or a worker still starting): plan for
        # the device named on the command line, as `accelhost plan --device N` does.
        return make_plan(host, devices=[device], **kwargs)


def _options(args: argparse.Namespace, **kw: Any) -> BindOptions:
    from accelhost.apply.build import BindOptions
    from accelhost.apply.irq import DEFAULT_STATE_DIR

    return BindOptions(
        host_root=getattr(args, "host_root", "/") or "/",
        irqbalance=getattr(args, "irqbalance", "stop"),
        state_dir=getattr(args, "state_dir", None) or DEFAULT_STATE_DIR,
        **kw,
    )


def _warn(lines: Any) -> None:
    for line in lines:
        print(f"accelhost: warning: {line}", file=sys.stderr)


def _quiet_library_log() -> None:
    """The CLI reports every failed step itself: keep logging's last-resort handler from
    printing the library's warning a second time, unprefixed."""
    import logging

    logger = logging.getLogger("accelhost.apply")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def _print_report(args: argparse.Namespace, rep: ApplyReport, out: Any = None) -> None:
    """The report as JSON or lines; the same for bind, exec and unbind, dry run or not."""
    stream = out or sys.stdout
    found = getattr(args, "device_found", None)
    if args.json:
        print_json({**rep.to_dict(), **({"device_found": found} if found else {})}, stream)
        return
    if found:
        print(f"device {found['device']}: {found['how']}", file=stream)
    _warn(rep.warnings)
    if rep.skipped is not None:
        print(f"accelhost: {rep.skipped}", file=sys.stderr)
    for line in rep.lines():
        print(line, file=stream)
    if not rep.dry_run and rep.skipped is None:
        counts: dict[str, int] = {}
        for r in rep.results:
            counts[r.status] = counts.get(r.status, 0) + 1
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing to do"
        print(f"{len(rep.results)} steps: {summary}", file=stream)
    for r in rep.failed:
        print(f"accelhost: warning: step failed: {r.step.describe()}: {r.detail}", file=sys.stderr)


def cmd_bind(args: argparse.Namespace) -> int:
    from accelhost.apply import driver

    if args.irq_only and args.no_irq:
        raise UsageError("--irq-only and --no-irq exclude each other")
    if args.pid is None and not args.irq_only:
        raise UsageError("--pid PID is required (or --irq-only to bind the device's IRQs only)")
    roles = thread_roles(args)
    device = device_of(args, "bind")
    if args.pid is not None and not args.irq_only and not os.path.isdir(f"/proc/{args.pid}"):
        raise ApplyError(f"process {args.pid} does not exist")
    plan = load_plan(args, device)
    if args.irq_only and plan.device_type != "950" and not plan.device(device).irq:
        raise ApplyError(
            f"--irq-only: the plan reserves no IRQ CPUs for device {device} "
            "(its 'irq' list is empty): nothing to bind"
        )
    options = _options(
        args,
        pid=None if args.irq_only else args.pid,
        threads=not args.irq_only,
        memory=not (args.irq_only or args.no_memory),
        irq=not args.no_irq,
        migrate_budget_ms=args.migrate_budget_ms,
    )
    _quiet_library_log()
    # The CLI binds on any architecture: naming the process is the override.
    rep = driver.bind(plan, device, options, roles=roles, dry_run=args.dry_run, any_arch=True)
    _print_report(args, rep)
    return rep.exit_status


def cmd_exec(args: argparse.Namespace) -> int:
    from accelhost.apply import driver

    argv = list(args.command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UsageError("no command to run: accelhost exec --device N -- COMMAND [ARG...]")
    roles = thread_roles(args)
    device = device_of(args, "exec")
    plan = load_plan(args, device)
    options = _options(args, membind=args.membind, memory=not args.no_memory, irq=not args.no_irq)
    _quiet_library_log()
    rep = driver.exec_report(
        plan, device, argv, options, roles=roles, dry_run=args.dry_run, any_arch=True
    )
    if args.dry_run:
        _print_report(args, rep)
        return rep.exit_status
    # The command owns standard output from here on: the report goes to standard error.
    _print_report(args, rep, sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        print(f"accelhost: cannot run {argv[0]!r}: command not found", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"accelhost: cannot run {argv[0]!r}: {exc.strerror}", file=sys.stderr)
        return 126
    return 0  # not reached


def cmd_verify(args: argparse.Namespace) -> int:
    from accelhost.apply.driver import with_roles
    from accelhost.apply.verify import verify

    roles = thread_roles(args)
    device = device_of(args, "verify")
    if args.pid is not None and not os.path.isdir(f"/proc/{args.pid}"):
        raise ApplyError(f"process {args.pid} does not exist")
    plan = with_roles(load_plan(args, device), device, roles)
    if args.pid is None and not _irqs_to_check(plan, device, args.no_irq):
        raise UsageError(
            f"nothing to check: give --pid PID (the plan has no IRQ CPUs for device {device}"
            + (", and --no-irq was given)" if args.no_irq else ")")
        )
    options = _options(args, pid=args.pid, irq=not args.no_irq)
    rep = verify(plan, device, options)
    found = getattr(args, "device_found", None)
    if args.json:
        print_json({**rep.to_dict(), **({"device_found": found} if found else {})})
    else:
        if found:
            print(f"device {found['device']}: {found['how']}")
        for line in rep.lines():
            print(line)
    return rep.exit_status


def _irqs_to_check(plan: Plan, device: int, no_irq: bool) -> bool:
    """Whether verify without --pid has anything to compare: IRQ masks or 950 host threads."""
    if plan.host_threads is not None and plan.host_threads.cpus:
        return True
    return not no_irq and plan.device_type != "950" and bool(plan.device(device).irq)


def cmd_unbind(args: argparse.Namespace) -> int:
    from accelhost.apply.build import build_unbind_irq, build_unbind_threads
    from accelhost.apply.execute import execute, plan_only
    from accelhost.apply.irq import DEFAULT_STATE_DIR
    from accelhost.apply.steps import ApplyReport

    if not args.irq and args.pid is None:
        raise UsageError("say what to unbind: --irq (restore IRQ masks) and/or --pid PID")
    device = one_device(args, "unbind")
    steps: list[Any] = []
    notes: list[str] = []
    if args.pid is not None:
        steps += build_unbind_threads(args.pid).steps
    if args.irq:
        p = build_unbind_irq(args.state_dir or DEFAULT_STATE_DIR, device, args.host_root)
        steps += p.steps
        notes += p.notes
    _quiet_library_log()
    results = plan_only(steps) if args.dry_run else execute(steps)
    rep = ApplyReport(tuple(results), (), args.dry_run, device, args.pid, None, tuple(notes))
    _print_report(args, rep)
    return rep.exit_status
