"""Glue to the doctor's preflight and the applier, imported only when their options are used.

Neither is reimplemented here: the preflight is `accelhost.hygiene.preflight.preflight`, the
plan is `accelhost.api.plan`, and binding is the applier's `build_bind` + `execute`, the
same steps `accelhost bind --pid` runs. A build without them says so in one line.
"""

from __future__ import annotations

import logging
import platform
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from accelhost.errors import AccelhostError
from accelhost.host.base import Host
from accelhost.procs import ProcessInfo, open_fd_targets

if TYPE_CHECKING:
    from accelhost.plans import Plan

_ACCEL_NODE = re.compile(r"^/dev/(?:davinci|nvidia)(\d+)$|^/dev/dri/renderD\d+$|^/dev/accel/")


def _unavailable(option: str, exc: ImportError) -> AccelhostError:
    return AccelhostError(f"{option} is not available in this build ({exc.name} is missing)")


def run_preflight(host: Host, util: float, device: int | None, log: Callable[[str], None]) -> None:
    """Refuse to start (AccelhostError with the preflight's own sentence) when the engine
    would not fit; a preflight that cannot read device memory at all only warns, because
    refusing to start an engine over a missing vendor tool would be an outage of our own."""
    try:
        from accelhost.hygiene.preflight import preflight
    except ImportError as exc:
        raise _unavailable("--preflight-util", exc) from None
    report = preflight(host, util, device)
    if report.status == "FAIL":
        raise AccelhostError(f"preflight: {report.reason}")
    if report.status != "OK":
        log(f"preflight could not check device memory ({report.reason}); starting anyway")
    else:
        log(f"preflight: {report.reason}")


def make_plan(host: Host, device: int) -> Plan:
    """The CPU plan, made before the engine starts so a host that cannot be planned for is
    refused up front (PlanError), not discovered minutes later."""
    try:
        from accelhost.api import plan
    except ImportError as exc:
        raise _unavailable("--bind", exc) from None
    the_plan = plan(host)
    the_plan.device(device)  # PlanError naming the planned devices when it is not there
    try:
        import accelhost.apply.build  # noqa: F401
        import accelhost.apply.execute  # noqa: F401
    except ImportError as exc:
        raise _unavailable("--bind", exc) from None
    return the_plan


def holders_of_device(host: Host, tree: dict[int, ProcessInfo], device: int) -> list[int]:
    """Members of the tree with an accelerator node open: the ones holding /dev/davinciN or
    /dev/nvidiaN for this very N when there are any, else any accelerator node (a device
    number inside *_VISIBLE_DEVICES need not equal the node number)."""
    exact: list[int] = []
    other: list[int] = []
    for pid, info in tree.items():
        if info.state == "Z":
            continue
        nodes = [t for t in open_fd_targets(host, pid) if _ACCEL_NODE.match(t)]
        if not nodes:
            continue
        if any(t.endswith(f"davinci{device}") or t.endswith(f"nvidia{device}") for t in nodes):
            exact.append(pid)
        else:
            other.append(pid)
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
    """Apply the plan to the engine's processes: those holding the device, else the command.

    IRQ and host-thread steps are per host, so they go with the first process only. A
    failed step is logged, never fatal: a bind must not stop an engine from serving."""
    from accelhost.apply.build import BindOptions, build_bind
    from accelhost.apply.execute import execute
    from accelhost.apply.steps import FAILED
    from accelhost.family import ASCEND_FAMILIES

    # execute() also logs failed steps; we report them ourselves, once, with our prefix.
    apply_log = logging.getLogger("accelhost.apply")
    if not apply_log.handlers:
        apply_log.addHandler(logging.NullHandler())

    if plan.device_type in ASCEND_FAMILIES and platform.machine().lower() not in (
        "aarch64",
        "arm64",
        "armv8l",
        "armv8b",
    ):
        log("--bind: CPU binding skipped: non-ARM CPU detected.")
        return
    pids = holders_of_device(host, tree, device) or ([cmd_pid] if cmd_pid else [])
    log(f"--bind: binding pid(s) {', '.join(map(str, pids))} to device {device} ({reason})")
    for n, pid in enumerate(pids):
        opts = BindOptions(pid=pid, irq=n == 0, host_threads=n == 0)
        try:
            prepared = build_bind(plan, device, opts, host)
        except (AccelhostError, OSError) as exc:
            log(f"--bind: pid {pid}: {exc}")
            continue
        for warning in prepared.warnings:
            log(f"--bind: {warning}")
        results = execute(prepared.steps, host)
        failed = [r for r in results if r.status == FAILED]
        log(f"--bind: pid {pid}: {len(results) - len(failed)} step(s) done, {len(failed)} failed")
        for r in failed:
            log(f"--bind: {r.line}")
