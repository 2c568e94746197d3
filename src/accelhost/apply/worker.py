"""`accelhost.bind_current_process`: bind the calling worker from inside the worker.

Call it after the model is loaded and warmed up, so the runtime's threads (ACL, release,
NCCL, ...) exist and get their CPUs. Messages go through `logging` under `accelhost.apply`.
Importing it loads only the plan types and a few standard modules; the applier (the one
bind driver, `accelhost.apply.driver`) is imported on the first call.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from accelhost.apply import DEFAULT_MIGRATE_BUDGET_MS, DEFAULT_STATE_DIR
from accelhost.errors import AccelhostError, ApplyError
from accelhost.plans import Plan, load_plan

if TYPE_CHECKING:
    from accelhost.apply.steps import ApplyReport
    from accelhost.planner.roles import RoleSpec

log = logging.getLogger("accelhost.apply")


def bind_current_process(
    plan: Plan | dict[str, Any] | str | os.PathLike[str],
    device: int | None = None,
    *,
    local_rank: int | None = None,
    migrate_budget_ms: int = DEFAULT_MIGRATE_BUDGET_MS,
    dry_run: bool = False,
    any_arch: bool = False,
    strict: bool = False,
    migrate_memory: bool = True,
    irq: bool = True,
    irqbalance: str = "stop",
    host_root: str = "/",
    state_dir: str = DEFAULT_STATE_DIR,
    thread_roles: Sequence[str | RoleSpec] = (),
    allow_foreign: bool = False,
) -> ApplyReport:
    """Bind every thread of this process to `device`'s CPUs in `plan`, then its memory and IRQs.

    The same driver as `accelhost bind --pid <this process>`. `thread_roles` are
    `--thread-role` strings or RoleSpecs. Without `device`, the device of worker
    `local_rank` (entry R of the visible-devices variable, as a host id). Returns the report
    (`report.ok`, `report.lines()`). A bad plan or a failed step is only logged, as a failed
    bind must not stop an engine from serving; with `strict=True` it raises `AccelhostError`.
    """
    pid = os.getpid()
    try:
        from accelhost.apply import driver
        from accelhost.apply.build import BindOptions
        from accelhost.planner.roles import parse_role_spec

        options = BindOptions(
            pid=pid,
            memory=migrate_memory,
            irq=irq,
            irqbalance=irqbalance,
            host_root=host_root,
            state_dir=state_dir,
            migrate_budget_ms=migrate_budget_ms,
            allow_foreign=allow_foreign,
        )
        roles = [parse_role_spec(r) if isinstance(r, str) else r for r in thread_roles]
        the_plan = load_plan(plan)
        found = None
        if device is None:
            from accelhost.apply.identity import device_of_local_rank

            if local_rank is None:
                raise ApplyError("say which device: device=N, or local_rank=R")
            found = device_of_local_rank(the_plan, local_rank)
            device = found.device
            log.info("%s", found.line())
        report = driver.bind(
            the_plan, device, options, roles=roles, dry_run=dry_run, any_arch=any_arch, found=found
        )
    except Exception as exc:  # a worker must keep serving whatever went wrong here
        if strict:
            raise
        from accelhost.apply.steps import ApplyReport

        unexpected = not isinstance(exc, AccelhostError)
        why = repr(exc) if unexpected else str(exc)
        after = " after an unexpected error" if unexpected else ""
        log.warning("CPU binding skipped%s: %s", after, why, exc_info=unexpected)
        return ApplyReport(skipped=why, device=device, pid=pid, dry_run=dry_run)
    _log(report, strict)
    return report


def _log(report: ApplyReport, strict: bool) -> None:
    """What the bind did, through `logging`; with `strict`, failed steps raise."""
    if report.skipped is not None:
        log.warning("%s", report.skipped)
        return
    for warning in report.warnings:
        log.warning("%s", warning)
    for note in report.notes:
        log.info("%s", note)
    failed, steps = report.failed, len(report.results)
    if not failed:
        log.info("bound process %d to device %d (%d steps)", report.pid, report.device, steps)
        return
    log.warning("%d of %d binding steps failed", len(failed), steps)
    if strict:
        raise ApplyError("; ".join(f"{r.step.describe()}: {r.detail}" for r in failed))
