"""`accelhost bind | exec | verify | unbind`: apply a plan to this machine, check it, undo it.

Every command builds its list of steps first; `--dry-run` prints that list and changes
nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

from accelhost.apply import DEFAULT_MIGRATE_BUDGET_MS, DEFAULT_STATE_DIR, IRQBALANCE_MODES
from accelhost.cli import common, options
from accelhost.errors import ApplyError, UsageError

if TYPE_CHECKING:
    from accelhost.apply.build import BindOptions
    from accelhost.apply.identity import Identified
    from accelhost.apply.steps import ApplyReport
    from accelhost.plans import Plan

BIND_DESCRIPTION = (
    "Pin every thread of a process to the plan's CPUs for one device (ACL "
    "and release threads to their own CPUs), move its memory to the device's NUMA node "
    "and the device's IRQs onto the reserved IRQ CPUs."
)
EXEC_DESCRIPTION = (
    "Set this process's CPUs and memory policy, bind the device's IRQs, then "
    "replace it with COMMAND, which is bound from its first instruction. Threads created "
    "later (ACL, release) inherit the main CPUs; re-pin them from the worker with "
    "accelhost.bind_current_process() or with `accelhost bind`."
)
VERIFY_DESCRIPTION = (
    "Compare every thread's affinity and the device's IRQ masks with the plan, and show where the "
    "process's memory lives. Exit 0 when all match, 1 with one line per thread or IRQ that "
    "drifted, 2 when nothing could be checked (cannot tell) or on a usage error."
)
UNBIND_DESCRIPTION = (
    "--irq puts back the IRQ masks (and irqbalance) as they were before "
    "`bind`; --pid gives every thread of a process its whole cpuset again."
)
EPILOG = (
    "exit status: 0 every step succeeded, 2 some steps failed (partial) or a usage error "
    "(a --plan file that is no plan included), 1 nothing applied (a device not in the "
    "plan, a plan of another host, a process that is gone)"
)
EXEC_EPILOG = (
    "exit status: COMMAND's own once it runs (127: not found, 126: cannot run); before, "
    "2 a usage error (a --plan file that is no plan included), 1 nothing could be bound "
    "(a device not in the plan, a plan of another host); with --dry-run, as bind's"
)
UNBIND_EPILOG = (
    "exit status: 0 everything restored, 2 some steps failed (partial) or a usage error, "
    "1 nothing could be restored"
)
HELD_DEVICE = "; without it, the device the --pid process holds open"


def _budget_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected milliseconds, 0 or more, got {text!r}")
    return value


def build_bind(bind: argparse.ArgumentParser) -> None:
    common.command(bind, cmd_bind, BIND_DESCRIPTION, EPILOG)
    plan_options(bind, "apply", f"the device whose plan to apply{HELD_DEVICE}")
    options.pid(bind, "the worker (required unless --irq-only)")
    options.dry_run(bind)
    bind.add_argument("--irq-only", action="store_true", help="run only the IRQ step")
    options.no_irq(bind, "do not move them")
    options.no_memory(bind, "do not move the process's pages")
    bind.add_argument(
        "--migrate-budget-ms",
        type=_budget_ms,
        default=DEFAULT_MIGRATE_BUDGET_MS,
        metavar="MS",
        help="stop moving memory pages after this long, between two batches "
        f"(default {DEFAULT_MIGRATE_BUDGET_MS})",
    )
    options.device_glob(bind)
    irq_options(bind)
    options.thread_role(bind)
    options.json_output(bind)


def build_exec(ex: argparse.ArgumentParser) -> None:
    common.command(ex, cmd_exec, EXEC_DESCRIPTION, EXEC_EPILOG)
    plan_options(ex, "apply", "the device whose plan to apply")
    options.dry_run(ex)
    options.no_irq(ex, "do not move them")
    options.no_memory(ex, "set no memory policy")
    options.membind(ex)
    irq_options(ex)
    options.thread_role(ex)
    options.json_output(ex)
    # not "command": main.py names the subcommand so (its errors say "accelhost exec: ...")
    ex.add_argument(
        "cmd_argv", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- COMMAND [ARG...]"
    )


def build_verify(ver: argparse.ArgumentParser) -> None:
    common.command(ver, cmd_verify, VERIFY_DESCRIPTION)
    plan_options(ver, "check against", f"the device whose plan to check{HELD_DEVICE}")
    options.pid(ver, "the worker (omit to check IRQs only)")
    options.no_irq(ver, "do not check them")
    options.host_root(ver)
    options.device_glob(ver)
    options.thread_role(ver)
    options.json_output(ver)


def build_unbind(un: argparse.ArgumentParser) -> None:
    common.command(un, cmd_unbind, UNBIND_DESCRIPTION, UNBIND_EPILOG)
    un.add_argument("--irq", action="store_true", help="restore the saved IRQ masks")
    options.pid(un, "give this process's threads all allowed CPUs")
    options.device(un, "with --irq: only this device's IRQs", one=True)
    options.host_root(un, "with --irq, only IRQs saved under this root")
    options.state_dir(un)
    un.add_argument(
        "--forget",
        action="store_true",
        help="with --irq: drop the saved masks that cannot be restored (their host root "
        "or IRQ is gone) instead of failing on them",
    )
    options.dry_run(un)
    options.json_output(un)


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
    device = common.one_device(args, what)
    if device is not None:
        return device, None
    if getattr(args, "pid", None) is None or getattr(args, "irq_only", False):
        raise UsageError(f"give --device N (the device whose plan to {what})")
    # No --device: the device the process holds open (exit 2 for none or several).
    from accelhost.apply.identity import device_for_command

    found = device_for_command(args.pid, args.plan, args.device_glob)
    return found.device, found


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

    kwargs = common.planning_kwargs(args)
    host = read_once(live_host())
    common.warn(narrowed_warning("self", host))
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
    if args.json:
        common.print_json(rep.to_dict(), stream)
        return
    if rep.device_found is not None:
        print(rep.device_found.line(), file=stream)
    common.warn(rep.warnings)
    if rep.skipped is not None:
        print(f"accelhost: {rep.skipped}", file=sys.stderr)
    columns = common.terminal_columns(stream)
    for line in rep.lines():
        for part in common.fit(line, columns):
            print(part, file=stream)
    # A failed step is its `[failed]` line above, with the reason, once: the summary and
    # the exit status (2, or 1 when nothing else ran) say that something failed.
    if not rep.dry_run and rep.skipped is None:
        counts = Counter(r.status for r in rep.results)
        summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "nothing to do"
        print(f"{len(rep.results)} steps: {summary}", file=stream)


def cmd_bind(args: argparse.Namespace) -> int:
    from accelhost.apply import driver

    if args.irq_only and args.no_irq:
        raise UsageError("--irq-only and --no-irq exclude each other")
    if args.pid is None and not args.irq_only:
        raise UsageError("--pid PID is required (or --irq-only to bind the device's IRQs only)")
    roles = common.thread_roles(args)
    device, found = device_of(args, "bind")
    if args.pid is not None and not args.irq_only and not os.path.isdir(f"/proc/{args.pid}"):
        raise ApplyError(f"process {args.pid} does not exist")
    plan = load_plan(args, device)
    if args.irq_only and plan.device_type != "950" and not plan.device(device).irq:
        raise ApplyError(
            f"--irq-only: the plan reserves no IRQ CPUs for device {device} "
            "(its 'irq' list is empty): nothing to bind"
        )
    options = bind_options(
        args,
        pid=None if args.irq_only else args.pid,
        threads=not args.irq_only,
        memory=not (args.irq_only or args.no_memory),
        irq=not args.no_irq,
        migrate_budget_ms=args.migrate_budget_ms,
    )
    _quiet_library_log()
    # The CLI binds on any architecture: naming the process is the override.
    rep = driver.bind(
        plan, device, options, roles=roles, dry_run=args.dry_run, any_arch=True, found=found
    )
    _print_report(args, rep)
    return rep.exit_status


def cmd_exec(args: argparse.Namespace) -> int:
    from accelhost.apply import driver

    argv = common.command_after_dashes(
        args.cmd_argv, "no command to run: accelhost exec --device N -- COMMAND [ARG...]"
    )
    roles = common.thread_roles(args)
    device, _ = device_of(args, "exec")
    plan = load_plan(args, device)
    options = bind_options(
        args, membind=args.membind, memory=not args.no_memory, irq=not args.no_irq
    )
    _quiet_library_log()
    rep = driver.bind(
        plan, device, options, argv=argv, roles=roles, dry_run=args.dry_run, any_arch=True
    )
    # Once it runs, the command owns standard output: the report goes to standard error.
    _print_report(args, rep, sys.stdout if args.dry_run else sys.stderr)
    if args.dry_run:
        return rep.exit_status
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


def cmd_verify(args: argparse.Namespace) -> int:
    from accelhost.apply.driver import refuse_foreign, with_roles
    from accelhost.apply.verify import verify

    roles = common.thread_roles(args)
    device, found = device_of(args, "verify")
    if args.pid is not None and not os.path.isdir(f"/proc/{args.pid}"):
        raise ApplyError(f"process {args.pid} does not exist")
    plan = with_roles(load_plan(args, device), device, roles)
    if args.pid is None and not _irqs_to_check(plan, device, args.no_irq):
        raise UsageError(
            f"nothing to check: give --pid PID (the plan has no IRQ CPUs for device {device}"
            + (", and --no-irq was given)" if args.no_irq else ")")
        )
    options = bind_options(args, pid=args.pid, irq=not args.no_irq)
    refuse_foreign(plan, options.allow_foreign)
    rep = verify(plan, device, options)
    if args.json:
        common.print_json({**rep.to_dict(), **({"device_found": found.to_dict()} if found else {})})
    else:
        if found:
            print(found.line())
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
    from accelhost.apply.steps import ApplyReport

    if not args.irq and args.pid is None:
        raise UsageError("say what to unbind: --irq (restore IRQ masks) and/or --pid PID")
    if args.forget and not args.irq:
        raise UsageError("--forget drops saved IRQ masks: it goes with --irq")
    device = common.one_device(args, "unbind")
    steps: list[Any] = []
    notes: list[str] = []
    if args.pid is not None:
        steps += build_unbind_threads(args.pid).steps
    if args.irq:
        p = build_unbind_irq(
            args.state_dir or DEFAULT_STATE_DIR, device, args.host_root, forget=args.forget
        )
        steps += p.steps
        notes += p.notes
    _quiet_library_log()
    results = plan_only(steps) if args.dry_run else execute(steps)
    rep = ApplyReport(
        results=tuple(results),
        dry_run=args.dry_run,
        device=device,
        pid=args.pid,
        notes=tuple(notes),
    )
    _print_report(args, rep)
    return rep.exit_status
