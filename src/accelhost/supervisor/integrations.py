"""Glue to the doctor's preflight and the bind driver (the same ones `doctor` and `bind
--pid` call), imported only when their options are used.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from accelhost.errors import AccelhostError, ParseError, UsageError
from accelhost.host.base import Host
from accelhost.parsers.devnodes import node_kind
from accelhost.readers.procs import ProcessInfo, open_fds

if TYPE_CHECKING:
    from accelhost.plans import Plan


def run_preflight(host: Host, util: float, device: int | None, log: Callable[[str], None]) -> None:
    """Refuse to start when the engine would not fit; a preflight that cannot read device
    memory only warns (a missing vendor tool must not cause an outage of our own)."""
    from accelhost.hygiene.doctor.preflight import preflight

    report = preflight(host, util, device)
    if report.status == "FAIL":
        raise AccelhostError(f"preflight: {report.reason}")
    if report.status != "OK":
        log(f"preflight could not check device memory ({report.reason}); starting anyway")
    else:
        log(f"preflight: {report.reason}")


def bind_plan(
    host: Host,
    device_text: str,
    plan_file: str | None,
    role_texts: Sequence[str],
    any_arch: bool,
    log: Callable[[str], None],
    allow_foreign: bool = False,
) -> tuple[int, Plan | None]:
    """`--bind DEVICE [--plan FILE] [--thread-role ...]`: the device and the plan, made
    before the engine starts so a bad host, plan file or option is refused up front; the
    plan is None when the ARM policy skips it."""
    from accelhost.cpulist import parse_device_list

    try:
        ids = parse_device_list(device_text)
    except ParseError as exc:
        raise UsageError(f"--bind {device_text!r}: {exc.problem}") from None
    if len(ids) != 1:
        raise UsageError(f"--bind takes one device, got {device_text!r}")
    device = ids[0]
    from accelhost.apply import driver
    from accelhost.planner.roles import parse_role_spec
    from accelhost.plans import load_plan

    roles = [parse_role_spec(text) for text in role_texts]
    if plan_file:
        the_plan = load_plan(plan_file)
        driver.refuse_foreign(the_plan, allow_foreign)  # a plan made now is of the host it reads
    else:
        from accelhost.api import plan_for_device

        # as `accelhost bind` plans: the host's plan, else one for this device alone
        the_plan = plan_for_device(host, device)
    # PlanError naming the planned devices when it is not there, or a role that cannot fit.
    the_plan = driver.with_roles(the_plan, device, roles)
    skip = driver.arch_skip(the_plan, any_arch)
    if skip is not None:
        log(f"--bind: {skip} (--any-arch binds anyway)")
        return device, None
    return device, the_plan


def holders_of_device(host: Host, tree: dict[int, ProcessInfo], device: int) -> list[int]:
    """Members of the tree with an accelerator node open: the ones holding /dev/davinciN or
    /dev/nvidiaN for this very N when there are any, else any accelerator node (a device
    number inside *_VISIBLE_DEVICES need not equal the node number)."""
    exact: list[int] = []
    other: list[int] = []
    for pid, info in tree.items():
        fds = (open_fds(host, pid) or {}) if info.state != "Z" else {}
        nodes = [k for k in map(node_kind, fds.values()) if k is not None]
        if not nodes:
            continue
        exact_node = any(kind in ("davinci", "nvidia") and n == device for kind, n in nodes)
        (exact if exact_node else other).append(pid)
    return exact or other


def bind_tree(
    host: Host,
    plan: Plan,
    device: int,
    tree: dict[int, ProcessInfo],
    cmd_pid: int | None,
    reason: str,
    log: Callable[[str], None],
) -> None:
    """Apply the plan to the processes holding the device, else the command; IRQ and
    host-thread steps with the first only. A failed step is logged, never fatal."""
    from accelhost.apply import driver
    from accelhost.apply.build import BindOptions

    # execute() also logs failed steps; we report them ourselves, once, with our prefix.
    apply_log = logging.getLogger("accelhost.apply")
    if not apply_log.handlers:
        apply_log.addHandler(logging.NullHandler())

    pids = holders_of_device(host, tree, device) or ([cmd_pid] if cmd_pid else [])
    log(f"--bind: binding pid(s) {', '.join(map(str, pids))} to device {device} ({reason})")
    for n, pid in enumerate(pids):
        # the plan's host was checked by `bind_plan`, before the start (a plan made from
        # --snapshot is of the host the user named)
        opts = BindOptions(pid=pid, irq=n == 0, host_threads=n == 0, allow_foreign=True)
        try:
            report = driver.bind(plan, device, opts, any_arch=True, host=host)
        except (AccelhostError, OSError) as exc:
            log(f"--bind: pid {pid}: {exc}")
            continue
        failed = report.failed
        done = f"pid {pid}: {len(report.results) - len(failed)} step(s) done, {len(failed)} failed"
        for line in [*report.warnings, done, *(r.line for r in failed), *report.notes]:
            log(f"--bind: {line}")
