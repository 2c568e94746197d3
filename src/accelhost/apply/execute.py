"""Run prepared steps in order; each failure becomes a result, never an exception, and
does not stop the others: a thread that cannot be pinned says nothing about the IRQs."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accelhost.apply import irq as irqmod
from accelhost.apply.memory import set_mempolicy
from accelhost.apply.migrate import MoveRegions, run_move
from accelhost.apply.steps import (
    FAILED,
    OK,
    PLANNED,
    SKIPPED,
    ExecCommand,
    ForgetIrqState,
    IrqAffinity,
    IrqBalance,
    MemPolicy,
    OwnAffinity,
    SaveIrqState,
    Step,
    StepResult,
    ThreadAffinity,
    Unresolved,
)
from accelhost.cpulist import format_cpulist, parse_cpu_mask
from accelhost.errors import AccelhostError
from accelhost.host.live import live_host
from accelhost.kernel.libc import SyscallUnavailable

if TYPE_CHECKING:
    from accelhost.host.base import Host

log = logging.getLogger("accelhost.apply")


def plan_only(steps: Sequence[Step]) -> list[StepResult]:
    """A dry run's results: every step, as it would run (with why it cannot, if so)."""
    return [StepResult(s, PLANNED, s.reason if isinstance(s, Unresolved) else "") for s in steps]


def execute(steps: Sequence[Step], host: Host | None = None) -> list[StepResult]:
    """Run every step but an ExecCommand (the caller execs after reporting). Thread steps,
    hundreds per engine, run inline here: one Python call less per thread."""
    results: list[StepResult] = []
    append = results.append
    debug = log.isEnabledFor(logging.DEBUG)
    wanted: dict[tuple[int, ...], set[int]] = {}
    last: tuple[int, ...] | None = None  # the CPUs of the last thread step, as `cpus`
    cpus: set[int] = set()
    setaffinity, getaffinity, make = os.sched_setaffinity, os.sched_getaffinity, StepResult
    irqs = _IrqGuard(host)
    for step in steps:
        if type(step) is ThreadAffinity:
            # Most steps share one CPU tuple (main): an identity test is cheaper than
            # hashing a tuple of 40 CPUs for the dict on every thread.
            if step.cpus is not last:
                last = step.cpus
                found = wanted.get(last)
                if found is None:
                    found = wanted[last] = set(last)
                cpus = found
            try:
                setaffinity(step.tid, cpus)
                # Read back every thread: the kernel intersects the CPUs with the cpuset of
                # *that thread* (threads of one process can sit in different cpusets), and
                # cpusets and online CPUs can change between build and execute, so "ok"
                # without it would be a guess. One cheap call per thread.
                got = getaffinity(step.tid)
            except ProcessLookupError:
                status, detail = SKIPPED, "the thread has exited"
            except OSError as exc:
                status, detail = FAILED, _oserror(exc)
                if exc.errno == 22:  # EINVAL: none of the CPUs is allowed (cpuset, offline)
                    detail = "none of these CPUs is allowed for this thread (cpuset or offline)"
            except (OverflowError, ValueError) as exc:  # a CPU id no kernel has
                status, detail = FAILED, _bad_cpus(exc)
            else:
                if got == cpus:  # the common case, kept short: one result, no status test
                    result = make(step, OK)
                    if debug:
                        log.debug("%s", result.line)
                    append(result)
                    continue
                status, detail = FAILED, _kernel_set(got)
        elif isinstance(step, ExecCommand):
            continue
        elif isinstance(step, MoveRegions):  # its result carries per-node memory for --json
            append(run_move(step))
            continue
        else:
            status, detail = irqs.run(step)
        result = make(step, status, detail)
        if status == FAILED:
            log.warning("step failed: %s: %s", step.describe(), detail)
        elif debug:
            log.debug("%s", result.line)
        append(result)
    return results


@dataclass
class _IrqGuard:
    """Runs the steps other than threads, minding the IRQ state saved for `unbind --irq`.

    When the masks found cannot be saved, the IRQ writes after it are not made: a mask
    that `unbind --irq` cannot put back is worse than one left alone. A saved mask whose
    restore fails is kept, so that the next `unbind --irq` retries it.
    """

    host: Host | None
    unsaved: bool = False
    not_restored: set[str] = field(default_factory=set)

    def run(self, step: Step) -> tuple[str, str]:
        if self.unsaved and isinstance(step, IrqAffinity):
            return FAILED, "not written: the current masks could not be saved for `unbind --irq`"
        try:
            status, detail = self._run(step)
        except OSError as exc:
            status, detail = FAILED, _oserror(exc)
        except AccelhostError as exc:
            status, detail = FAILED, str(exc)
        if status == FAILED:
            if isinstance(step, SaveIrqState):
                self.unsaved = True
            elif isinstance(step, IrqAffinity) and step.state_key is not None:
                self.not_restored.add(step.state_key)
        return status, detail

    def _run(self, step: Step) -> tuple[str, str]:
        if isinstance(step, OwnAffinity):
            try:
                os.sched_setaffinity(0, step.cpus)
            except (OverflowError, ValueError) as exc:  # a CPU id no kernel has
                return FAILED, _bad_cpus(exc)
            got = os.sched_getaffinity(0)
            return (OK, "") if got == set(step.cpus) else (FAILED, _kernel_set(got))
        if isinstance(step, MemPolicy):
            try:
                set_mempolicy(step.mode, [step.node])
            except SyscallUnavailable as exc:
                return FAILED, f"set_mempolicy(2) unavailable: {exc}"
            return OK, ""
        if isinstance(step, SaveIrqState):
            added = irqmod.remember_masks(step.path, step.root, step.device, step.masks, step.bound)
            kept = len(step.masks) - len(added)
            return OK, (f"{kept} kept from an earlier bind" if kept else "")
        if isinstance(step, IrqAffinity):
            irqmod.write_mask(step.path, step.mask)
            now = live_host().read_file(step.path)
            if now is not None and set(parse_cpu_mask(now)) != set(step.cpus):
                return FAILED, f"the kernel kept mask {now.strip()}"
            return OK, ""
        if isinstance(step, ForgetIrqState):
            keys = tuple(k for k in step.keys if k not in self.not_restored)
            irqmod.forget(step.path, keys)
            kept = len(step.keys) - len(keys)
            return OK, (f"kept {kept} whose restore failed, to retry" if kept else "")
        if isinstance(step, IrqBalance):
            return _irqbalance(step, self.host or live_host())
        if isinstance(step, Unresolved):
            return FAILED, step.reason
        raise TypeError(f"unknown step {type(step).__name__}")


def _oserror(exc: OSError) -> str:
    """The kernel's reason alone: the step's own line already says what was called."""
    return os.strerror(exc.errno) if exc.errno else exc.strerror or str(exc)


def _bad_cpus(exc: Exception) -> str:
    return f"no such CPU on any kernel ({exc})"


def _kernel_set(got: set[int]) -> str:
    return f"the kernel set CPUs {format_cpulist(got)} instead (cpuset)"


def _irqbalance(step: IrqBalance, host: Host) -> tuple[str, str]:
    """Stop or start irqbalance, or ban the IRQ CPUs in its configuration and restore it;
    what a bind changes is saved first, and forgotten once `unbind --irq` has put it back
    (or left it, as someone changed it since: the `leave-*` actions)."""
    path, text = step.config_path, step.config_text
    if step.action == "stop" and step.state_path:
        record = {"action": "stop", "enabled": irqmod.unit_state(host)}
        irqmod.remember_irqbalance(step.state_path, record)
    elif step.action == "ban":
        assert path is not None
        if step.state_path:
            record = {"action": "ban", "config_path": path, "original": live_host().read_file(path)}
            irqmod.remember_irqbalance(step.state_path, {**record, "written": [text or ""]})
        irqmod.write_atomic(path, text or "")
    elif step.action == "restore":
        assert path is not None
        if text is not None:
            irqmod.write_atomic(path, text)
        elif os.path.exists(path):
            os.unlink(path)
    if not step.action.startswith("leave"):
        # restore: try-restart, as irqbalance may have been stopped since on purpose
        verb = {"ban": "restart", "restore": "try-restart"}.get(step.action, step.action)
        result = host.run(["systemctl", verb, step.service])
        if result is None:
            return FAILED, "systemctl is not available"
        if not result.ok:
            return FAILED, f"systemctl {verb} {step.service} exited with status {result.rc}"
    if step.action not in ("stop", "ban") and step.state_path:
        irqmod.forget(step.state_path, (), irqbalance=True)
    return OK, ""
