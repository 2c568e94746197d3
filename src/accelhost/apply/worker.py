"""`accelhost.bind_current_process`: bind the calling worker from inside the worker.

Call it after the model is loaded and warmed up, so the runtime's threads (ACL, release,
NCCL, ...) exist and get their CPUs. It never raises into the worker unless `strict=True`:
a failed bind must not stop an engine from serving. Messages go through `logging` under
`accelhost.apply`. Importing it loads only the plan types and a few standard modules;
the applier (the one bind driver, `accelhost.apply.driver`) is imported on the first call.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from accelhost.apply import DEFAULT_MIGRATE_BUDGET_MS, DEFAULT_STATE_DIR
from accelhost.errors import AccelhostError, ApplyError
from accelhost.plans import Plan, ThreadRole, load_plan

if TYPE_CHECKING:
    from accelhost.apply.steps import ApplyReport
    from accelhost.planner.roles import RoleSpec

log = logging.getLogger("accelhost.apply")


def bind_current_process(
    plan: Plan | dict[str, Any] | str | os.PathLike[str],
    device: int | None = None,
    *,
    local_rank: int | None = None,
    migrate_budget_ms: int | None = None,
    dry_run: bool = False,
    any_arch: bool = False,
    strict: bool = False,
    migrate_memory: bool = True,
    irq: bool = True,
    irqbalance: str = "stop",
    host_root: str = "/",
    state_dir: str = DEFAULT_STATE_DIR,
    thread_roles: Sequence[ThreadRole | RoleSpec | str] = (),
) -> ApplyReport:
    """Bind every thread of this process to `device`'s CPUs in `plan`, then its memory and IRQs.

    The same driver as `accelhost bind --pid <this process>` (apply/driver.py): Ascend plans
    are bound on ARM hosts only, as the reference does, unless `any_arch`. `thread_roles`
    are `--thread-role` strings (`nccl=^NCCL:2`, `nccl=^NCCL@40-41`), RoleSpecs or
    ThreadRoles. Without `device`, the device is the one of worker `local_rank` (the R-th
    entry of ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES / ..., mapped to the host id:
    `accelhost.apply.identity.device_of_local_rank`); the report's `device` is that host id.
    `migrate_budget_ms` bounds the memory migration (default 1000). Returns the report
    (`report.ok`, `report.lines()`); with `strict=True` a
    bad plan or a failed step raises `AccelhostError` instead of only logging a warning.
    """
    pid = os.getpid()
    device_found: dict[str, Any] | None = None
    try:
        # Imported here: `import accelhost` in a worker should cost next to nothing.
        from accelhost.apply import driver
        from accelhost.apply.build import BindOptions
        from accelhost.planner.roles import parse_role_spec

        roles = [parse_role_spec(r) if isinstance(r, str) else r for r in thread_roles]
        the_plan = load_plan(plan)
        if device is None:
            from accelhost.apply.identity import device_of_local_rank

            if local_rank is None:
                raise ApplyError("say which device: device=N, or local_rank=R")
            found = device_of_local_rank(the_plan, local_rank)
            device = found.device
            device_found = found.to_dict()
            log.info("device %d: %s", device, found.how)
        options = BindOptions(
            pid=pid,
            memory=migrate_memory,
            irq=irq,
            irqbalance=irqbalance,
            host_root=host_root,
            state_dir=state_dir,
            migrate_budget_ms=(
                DEFAULT_MIGRATE_BUDGET_MS if migrate_budget_ms is None else migrate_budget_ms
            ),
        )
        report = driver.bind(
            the_plan, device, options, roles=roles, dry_run=dry_run, any_arch=any_arch
        )
        if device_found is not None:
            report = replace(report, device_found=device_found)
    except AccelhostError as exc:
        if strict:
            raise
        log.warning("CPU binding skipped: %s", exc)
        return _skipped(dry_run, device, pid, str(exc))
    except Exception as exc:  # a worker must keep serving whatever went wrong here
        if strict:
            raise
        log.warning("CPU binding skipped after an unexpected error: %r", exc, exc_info=True)
        return _skipped(dry_run, device, pid, repr(exc))
    if report.skipped is not None:
        log.warning("%s", report.skipped)
        return report
    for warning in report.warnings:
        log.warning("%s", warning)
    for note in report.notes:
        log.info("%s", note)
    failed = report.failed
    if failed:
        log.warning("%d of %d binding steps failed", len(failed), len(report.results))
        if strict:
            raise ApplyError("; ".join(f"{r.step.describe()}: {r.detail}" for r in failed))
    else:
        log.info("bound process %d to device %d (%d steps)", pid, device, len(report.results))
    return report


def _skipped(dry_run: bool, device: int | None, pid: int, why: str) -> ApplyReport:
    from accelhost.apply.steps import ApplyReport

    return ApplyReport((), (), dry_run, device, pid, why)
