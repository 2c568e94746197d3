"""The bound arm: the steps `accelhost exec` runs before it execs, run in the child instead.

`exec` builds its steps with `build_exec` and carries them out with `execute` in its own
process just before `execve`. The benchmark forks a child per bound run and runs the same
steps, through the same two functions, in the child between fork and exec: the command is
bound from its first instruction exactly as under `exec`, and the benchmark itself stays
unbound for the other arm. IRQ steps are left out: they change the host for both arms
(and stop irqbalance); bind IRQs once, before the benchmark, if the plan has them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelhost.cpulist import format_cpulist
from accelhost.errors import ApplyError

if TYPE_CHECKING:
    from accelhost.apply.steps import Step


class BindFailed(Exception):
    """Raised in the child when a binding step failed; the detail went through a pipe."""


@dataclass(frozen=True)
class Binding:
    """What the bound arm's child gets before it execs, and how to say so."""

    steps: tuple[Step, ...]
    cpus: tuple[int, ...]
    source: str  # "--cpus" or the plan file
    device: int | None
    warnings: tuple[str, ...] = ()

    def label(self) -> str:
        where = "--cpus" if self.device is None else f"plan {self.source}, device {self.device}"
        return f"{where}, as `accelhost exec` binds (no IRQ steps): " + "; ".join(
            s.describe().replace(" of the new command", "") for s in self.steps
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "device": self.device,
            "cpus": list(self.cpus),
            "steps": [s.describe() for s in self.steps],
        }


def from_cpus(cpus: Sequence[int]) -> Binding:
    """CPU affinity only, with exec's own step for it; the memory policy stays default."""
    from accelhost.apply.steps import OwnAffinity
    from accelhost.apply.traps import outside_cpuset_warning

    chosen = tuple(sorted(set(cpus)))
    check_allowed(chosen)
    warnings = outside_cpuset_warning(os.getpid(), chosen)
    return Binding((OwnAffinity(chosen),), chosen, "--cpus", None, tuple(warnings))


def from_plan(path: str, device: int, *, memory: bool = True, membind: bool = False) -> Binding:
    """`exec --plan FILE --device N --no-irq` minus the execve: CPUs and memory policy."""
    from accelhost.apply.build import BindOptions, build_exec
    from accelhost.apply.steps import ExecCommand, OwnAffinity
    from accelhost.plans import load_plan

    plan = load_plan(path)
    plan.device(device)  # PlanError naming the planned devices, before anything runs
    options = BindOptions(irq=False, memory=memory, membind=membind)
    prepared = build_exec(plan, device, ["true"], options)
    steps = tuple(s for s in prepared.steps if not isinstance(s, ExecCommand))
    cpus = next((s.cpus for s in steps if isinstance(s, OwnAffinity)), ())
    check_allowed(cpus)
    return Binding(steps, tuple(cpus), path, device, (*prepared.warnings, *prepared.notes))


def check_allowed(cpus: Sequence[int]) -> None:
    """Refuse before the first run: every bound run would fail (or be bound to fewer CPUs
    than asked, which is not the binding being measured)."""
    allowed = os.sched_getaffinity(0)
    if outside := sorted(set(cpus) - allowed):
        raise ApplyError(
            f"CPUs {format_cpulist(outside)} of the bound arm are not among the CPUs this "
            f"process may use ({format_cpulist(sorted(allowed))})"
        )


def apply_in_child(steps: Sequence[Step], report_fd: int) -> None:
    """preexec_fn of a bound run: exec's steps, in the forked child, before execve.

    A failed step is written to `report_fd` and raised, so the parent's Popen fails and
    the command never runs unbound under the "bound" label.
    """
    from accelhost.apply.execute import execute
    from accelhost.apply.steps import FAILED

    if failed := [r for r in execute(steps) if r.status == FAILED]:
        text = "; ".join(f"{r.step.describe()}: {r.detail}" for r in failed)
        os.write(report_fd, text.encode("utf-8", "replace")[:4000])
        raise BindFailed(text)
