"""`accelhost.bind_current_process`: bind the calling worker from inside the worker.

Call it after the model is loaded and warmed up, so the runtime's threads (ACL, release,
NCCL, ...) exist and get their CPUs. It never raises into the worker unless `strict=True`:
a failed bind must not stop an engine from serving. Messages go through `logging` under
`accelhost.apply`. Importing it loads only the plan types and a few standard modules;
the applier itself is imported on the first call.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any

from accelhost.errors import AccelhostError, ApplyError
from accelhost.family import ASCEND_FAMILIES
from accelhost.plans import Plan, ThreadRole

if TYPE_CHECKING:
    from accelhost.apply.steps import ApplyReport

log = logging.getLogger("accelhost.apply")

NON_ARM = "CPU binding skipped: non-ARM CPU detected."
ARM_MACHINES = ("aarch64", "arm64", "armv8l", "armv8b")
DEFAULT_STATE_DIR = "/var/lib/accelhost"


def load_plan(plan: Plan | dict[str, Any] | str | os.PathLike[str]) -> Plan:
    """A Plan, its dict form, or the path of a plan JSON file."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return Plan.from_dict(plan, "plan")
    import json

    path = os.fspath(plan)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ApplyError(f"cannot read plan file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ApplyError(f"{path}: not valid JSON ({exc})") from None
    return Plan.from_dict(data, path)


def bind_current_process(
    plan: Plan | dict[str, Any] | str | os.PathLike[str],
    device: int,
    *,
    dry_run: bool = False,
    any_arch: bool = False,
    strict: bool = False,
    migrate_memory: bool = True,
    irq: bool = True,
    irqbalance: str = "stop",
    host_root: str = "/",
    state_dir: str = DEFAULT_STATE_DIR,
    thread_roles: tuple[ThreadRole, ...] = (),
) -> ApplyReport:
    """Bind every thread of this process to `device`'s CPUs in `plan`, then its memory and IRQs.

    Ascend plans are bound on ARM hosts only, as the reference does, unless `any_arch`.
    Returns the report (`report.ok`, `report.lines()`); with `strict=True` a bad plan or a
    failed step raises `AccelhostError` instead of only logging a warning.
    """
    # Imported here: `import accelhost` in a worker should cost next to nothing.
    from accelhost.apply.build import BindOptions, build_bind
    from accelhost.apply.execute import execute, plan_only
    from accelhost.apply.steps import ApplyReport

    try:
        the_plan = load_plan(plan)
        the_plan.device(device)  # an unknown device is a plan error, before anything else
        if (
            the_plan.device_type in ASCEND_FAMILIES
            and not any_arch
            and os.uname().machine.lower() not in ARM_MACHINES
        ):
            log.warning(NON_ARM)
            return ApplyReport((), (), dry_run, device, os.getpid(), NON_ARM)
        options = BindOptions(
            pid=os.getpid(),
            memory=migrate_memory,
            irq=irq,
            irqbalance=irqbalance,
            host_root=host_root,
            state_dir=state_dir,
            extra_roles=tuple(thread_roles),
        )
        prepared = build_bind(the_plan, device, options)
        for warning in prepared.warnings:
            log.warning("%s", warning)
        results = plan_only(prepared.steps) if dry_run else execute(prepared.steps)
        report = ApplyReport(
            tuple(results),
            prepared.warnings,
            dry_run,
            device,
            os.getpid(),
            None,
            prepared.notes,
        )
    except AccelhostError as exc:
        if strict:
            raise
        log.warning("CPU binding skipped: %s", exc)
        return ApplyReport((), (), dry_run, device, os.getpid(), str(exc))
    except Exception as exc:  # a worker must keep serving whatever went wrong here
        if strict:
            raise
        log.warning("CPU binding skipped after an unexpected error: %r", exc, exc_info=True)
        return ApplyReport((), (), dry_run, device, os.getpid(), repr(exc))
    for note in report.notes:
        log.info("%s", note)
    failed = report.failed
    if failed:
        log.warning("%d of %d binding steps failed", len(failed), len(report.results))
        if strict:
            raise ApplyError("; ".join(f"{r.step.describe()}: {r.detail}" for r in failed))
    else:
        log.info(
            "bound process %d to device %d (%d steps)", os.getpid(), device, len(report.results)
        )
    return report
