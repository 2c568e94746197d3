"""`accelhost run [options] -- CMD ...`: supervise one engine (see docs/run.md).

This may be PID 1 of every inference container, so the module imports nothing heavy at
the top (what argparse loads anyway); the supervisor, the preflight and the applier come in
only when the handler runs and needs them.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import re
import sys
from typing import Any

from accelhost.cli import options
from accelhost.cli.common import command, command_after_dashes, host_from_args, one_device
from accelhost.errors import SnapshotError, UsageError

DESCRIPTION = (
    "Run CMD as a supervised engine: signals are passed to it, every process it starts is "
    "reaped, and when it ends (or on SIGTERM/SIGINT/SIGQUIT) its whole tree is stopped "
    "(SIGTERM, --grace, SIGKILL) and the System V shared memory and /dev/shm files it left "
    "are removed. Exit status: CMD's own, 128+N when CMD died of signal N, 127 when CMD was "
    "not found, 1 when run could not do it, 2 for a bad command line."
)
EPILOG = "Example: accelhost run --grace 30 --fail-on-exit 'VLLM::EngineCore' -- vllm serve MODEL"


def build_run(p: argparse.ArgumentParser) -> None:
    from accelhost.supervisor.options import SupervisorOptions as defaults

    command(p, handler, DESCRIPTION, EPILOG)
    options.grace(p, "the command's tree")
    p.add_argument(
        "--kill-wait",
        type=options.seconds,
        default=defaults.kill_wait_s,
        metavar="SECONDS",
        help="how long to wait for SIGKILLed processes before reporting them "
        f"(default {defaults.kill_wait_s:g})",
    )
    p.add_argument(
        "--fail-on-exit",
        action="append",
        default=[],
        metavar="PATTERN",
        help="regular expression searched in descendants' command lines (e.g. 'VLLM::EngineCore'); "
        "when such a process dies while CMD runs, stop everything and exit 1 (repeatable)",
    )
    p.add_argument(
        "--cgroup",
        action="store_true",
        help="also track the tree through a cgroup of its own (v2, else v1 freezer/pids)",
    )
    p.add_argument(
        "--cgroup-version",
        choices=("auto", "1", "2"),
        default="auto",
        help="which cgroup hierarchy --cgroup uses (default auto: v2 when writable)",
    )
    p.add_argument(
        "--keep-shm",
        action="store_true",
        help="do not remove the System V segments and /dev/shm files left by the tree",
    )
    p.add_argument(
        "--private-ipc",
        action="store_true",
        help="give the tree an IPC namespace and a /dev/shm of its own (needs "
        "CAP_SYS_ADMIN): the kernel frees every segment and shm file with its last process",
    )
    options.expect_util(p, "preflight before the start (refuse to start when it fails)")
    options.device(p, "the device --expect-util checks", one=True)
    p.add_argument(
        "--bind",
        metavar="DEVICE",
        help="apply the CPU plan of DEVICE to the engine once it has opened the device "
        "(the same driver as `accelhost bind`)",
    )
    options.plan_file(
        p, "with --bind: the plan to apply (default: plan this host, or --snapshot, first)"
    )
    options.thread_role(p, "with --bind, as for `accelhost bind`")
    p.add_argument(
        "--any-arch",
        action="store_true",
        help="with --bind: bind Ascend plans on non-ARM hosts too (default: skip, as the "
        "reference does)",
    )
    options.force(p)
    p.add_argument(
        "--bind-delay",
        type=float,
        metavar="SECONDS",
        help="with --bind: bind after this long even if no process holds the device yet",
    )
    p.add_argument(
        "--scan-interval",
        type=float,
        default=defaults.scan_interval_s,
        metavar="SECONDS",
        help="slowest /proc rescan while --fail-on-exit or --bind tracks processes "
        f"(default {defaults.scan_interval_s:g})",
    )
    options.snapshot(
        p,
        "run takes only the preflight's device memory and the --bind plan from it: the "
        "processes supervised are always this machine's",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print problems only")
    # not "command": main.py names the subcommand so (its usage errors say "accelhost run: ...")
    p.add_argument("cmd_argv", nargs=argparse.REMAINDER, metavar="-- CMD ...")


def _check(args: argparse.Namespace) -> int | None:
    """Usage errors (exit 2) before anything starts; returns the preflight's device."""
    if not math.isfinite(args.scan_interval):
        raise UsageError("--scan-interval must be a number of seconds")
    if args.scan_interval <= 0:
        raise UsageError("--scan-interval must be positive")
    if args.expect_util is not None and not 0 < args.expect_util <= 1:
        raise UsageError("--expect-util must be in (0, 1], e.g. 0.85")
    if args.device is not None and args.expect_util is None:
        raise UsageError("--device goes with --expect-util (for --bind, give it there)")
    if args.bind_delay is not None and (args.bind is None or args.bind_delay < 0):
        raise UsageError("--bind-delay needs --bind and a delay >= 0")
    if args.private_ipc and args.keep_shm:
        raise UsageError(
            "--keep-shm and --private-ipc do not go together (the kernel "
            "frees a private namespace's memory with its last process)"
        )
    for pattern in args.fail_on_exit:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"--fail-on-exit {pattern!r}: {exc}") from None
    return one_device(args, "run --expect-util")


def _printer(quiet: bool) -> Any:
    def say(line: str) -> None:
        if not quiet:
            # A closed or broken stderr must not stop a teardown half way.
            with contextlib.suppress(OSError, ValueError):
                print(f"accelhost run: {line}", file=sys.stderr, flush=True)

    return say


def handler(args: argparse.Namespace) -> int:
    argv = command_after_dashes(
        args.cmd_argv, "no command given (accelhost run [options] -- CMD ...)"
    )
    device = _check(args)
    from accelhost.host.live import live_host
    from accelhost.supervisor import SupervisorOptions, supervise
    from accelhost.supervisor.options import BindRequest

    host = live_host()
    log = _printer(args.quiet)
    warn = _printer(False)
    facts_host: Any = host
    if args.snapshot:
        try:
            facts_host = host_from_args(args)
        except SnapshotError as exc:  # the user named something that is no recording
            raise UsageError(f"--snapshot: {exc}") from None
    if args.expect_util is not None:
        from accelhost.supervisor.integrations import run_preflight

        run_preflight(facts_host, args.expect_util, device, log)
    bind = None
    if args.bind is not None:
        from accelhost.supervisor.integrations import bind_plan

        device, plan = bind_plan(
            facts_host, args.bind, args.plan, args.thread_role, args.any_arch, log, args.force
        )
        if plan is not None:  # None: skipped on this architecture, and said so
            bind = BindRequest(device, plan, args.bind_delay)
    elif args.plan or args.thread_role or args.any_arch or args.force:
        raise UsageError("--plan, --thread-role, --any-arch and --force go with --bind DEVICE")
    options = SupervisorOptions(
        argv=argv,
        grace_s=args.grace,
        kill_wait_s=args.kill_wait,
        fail_on_exit=tuple(args.fail_on_exit),
        cgroup=args.cgroup_version if args.cgroup else None,
        clean_shm=not args.keep_shm,
        private_ipc=args.private_ipc,
        scan_interval_s=args.scan_interval,
        bind=bind,
        log=log,
        warn=warn,
    )
    return supervise(options, host).status
