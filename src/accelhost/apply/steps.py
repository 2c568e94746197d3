"""Steps: one dataclass per kind of change, plus their outcomes and the whole report.

A bind makes one `ThreadAffinity` and one `StepResult` per thread (hundreds on an inference
engine), so those two are slotted and not frozen: a frozen `__init__` stores each field
through `object.__setattr__`, five times the cost of a plain one. Nothing changes a step or
a result once made; the report that holds them is frozen.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar

from accelhost import formats
from accelhost.cpulist import format_cpulist

if TYPE_CHECKING:
    from accelhost.apply.identity import Identified

# Outcomes. `noop` is a success that changed nothing (e.g. memory on a one-node host).
PLANNED = "planned"
OK = "ok"
NOOP = "noop"
SKIPPED = "skipped"
FAILED = "failed"

# Exit statuses of bind / exec / unbind.
EXIT_OK = 0
EXIT_NOTHING = 1
EXIT_PARTIAL = 2


def _cpus(cpus: tuple[int, ...]) -> str:
    return format_cpulist(cpus) or "(none)"


class Step(ABC):
    """Base of every step (each a dataclass); `kind` groups steps for `--irq-only`, JSON
    and the report. Not a dataclass itself, so a step may be frozen or not."""

    __slots__ = ()  # so that slotted subclasses (ThreadAffinity) have no __dict__
    kind: ClassVar[str] = "step"
    __dataclass_fields__: ClassVar[dict[str, Any]]  # every step is a dataclass (`fields`)

    @abstractmethod
    def describe(self) -> str:
        """One line saying what the step does, as dry runs and reports print it."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "description": self.describe()}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(slots=True)
class ThreadAffinity(Step):
    """Pin one thread; `role` says which plan role chose the CPUs (main, acl, ...)."""

    kind: ClassVar[str] = "thread"
    pid: int
    tid: int
    name: str
    role: str
    cpus: tuple[int, ...]

    def describe(self) -> str:
        return (
            f"set affinity of thread {self.tid} ({self.name}) of process {self.pid} "
            f"to CPUs {_cpus(self.cpus)} [{self.role}]"
        )


@dataclass(frozen=True)
class OwnAffinity(Step):
    """Pin the accelhost process itself right before it execs the user's command."""

    kind: ClassVar[str] = "thread"
    cpus: tuple[int, ...]

    def describe(self) -> str:
        return f"set affinity of the new command to CPUs {_cpus(self.cpus)} [main]"


@dataclass(frozen=True)
class MemPolicy(Step):
    """Set the memory policy the exec'ed command starts with (inherited across execve)."""

    kind: ClassVar[str] = "memory"
    mode: str  # "preferred" or "bind"
    node: int

    def describe(self) -> str:
        return f"set the memory policy of the new command to {self.mode} node {self.node}"


@dataclass(frozen=True)
class SaveIrqState(Step):
    """Remember the masks found before binding so `unbind --irq` can put them back, and
    the masks this bind writes (`bound`), so that it puts back none set since by others."""

    kind: ClassVar[str] = "irq"
    path: str
    device: int
    root: str
    masks: tuple[tuple[int, str], ...]
    bound: tuple[tuple[int, str], ...] = ()

    def describe(self) -> str:
        saved = ", ".join(f"{irq}={mask}" for irq, mask in self.masks)
        return f"save current IRQ masks ({saved}) to {self.path}"


@dataclass(frozen=True)
class IrqAffinity(Step):
    """Write one IRQ's smp_affinity; `purpose` says which interrupt of which device."""

    kind: ClassVar[str] = "irq"
    irq: int
    cpus: tuple[int, ...]
    mask: str
    path: str
    purpose: str
    previous: str | None = None
    state_key: str | None = None  # unbind: the saved record this write restores

    def describe(self) -> str:
        was = f" (was {self.previous})" if self.previous is not None else ""
        cpus = f"(CPUs {_cpus(self.cpus)})"
        return f"write mask {self.mask} {cpus} to {self.path}{was} [{self.purpose}]"


@dataclass(frozen=True)
class ForgetIrqState(Step):
    """After a restore, drop the restored IRQs from the saved state; or, with
    `unbind --irq --forget`, the saved IRQs that cannot be restored (`why` says why)."""

    kind: ClassVar[str] = "irq"
    path: str
    keys: tuple[str, ...]
    why: str = ""

    def describe(self) -> str:
        if self.why:
            return f"forget {len(self.keys)} saved IRQ(s) in {self.path} that {self.why}"
        return f"forget {len(self.keys)} restored IRQ(s) in {self.path}"


@dataclass(frozen=True)
class IrqBalance(Step):
    """Keep irqbalance from undoing the IRQ masks: `stop` (the reference's way), `ban`
    (write `config_text`, restart); unbind's `start` and `restore` undo them."""

    kind: ClassVar[str] = "irqbalance"
    action: str
    service: str = "irqbalance.service"
    cpus: tuple[int, ...] = ()
    config_path: str | None = None
    config_text: str | None = None
    state_path: str | None = None

    def describe(self) -> str:
        text = _IRQBALANCE_DOES.get(self.action, _IRQBALANCE_DOES["restore"])
        return text.format(s=self.service, cpus=_cpus(self.cpus), path=self.config_path)


_IRQBALANCE_DOES = {
    "stop": "stop {s} (it would move the IRQs back; restart with unbind --irq)",
    "ban": "ban CPUs {cpus} in {path} (IRQBALANCE_BANNED_CPULIST) and restart {s}",
    "start": "start {s} again (accelhost stopped it)",
    "restore": "restore {path} as it was before binding and restart {s} if it runs",
    "leave-stopped": "leave {s} stopped: disabled or masked since bind, so not started again",
    "leave-config": "leave {path} as it is: edited since bind, so not restored (bans in it stay)",
}


@dataclass(frozen=True)
class ExecCommand(Step):
    """Replace accelhost with the user's command; affinity and policy carry over execve."""

    kind: ClassVar[str] = "exec"
    argv: tuple[str, ...]

    def describe(self) -> str:
        return f"exec {shlex.join(self.argv)}"


@dataclass(frozen=True)
class Unresolved(Step):
    """A step that could not be prepared; it fails when run, so dry runs show it too."""

    kind: ClassVar[str] = "unresolved"
    what: str
    reason: str

    def describe(self) -> str:
        # The reason is the result's detail (dry run and real run alike), not said twice.
        return f"{self.what}: cannot be done"


@dataclass(slots=True)
class StepResult:
    step: Step
    status: str
    detail: str = ""

    @property
    def line(self) -> str:
        tail = f": {self.detail}" if self.detail else ""
        return f"[{self.status}] {self.step.describe()}{tail}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.step.to_dict(), "status": self.status, "detail": self.detail}


@dataclass(frozen=True, kw_only=True)
class ApplyReport:
    """What a bind (or dry run) did, step by step, with the warnings given before it.
    A skipped bind (`skipped`: why nothing changed) is not ok: it exits 1, never reads as "done"."""

    results: tuple[StepResult, ...] = ()
    warnings: tuple[str, ...] = ()
    dry_run: bool = False
    device: int | None = None
    pid: int | None = None
    skipped: str | None = None
    notes: tuple[str, ...] = ()
    device_found: Identified | None = None
    # The plan skipped this worker (Ascend 950): only the host threads were bound.
    worker_skipped: str | None = None

    @property
    def failed(self) -> list[StepResult]:
        return [r for r in self.results if r.status == FAILED]

    @property
    def exit_status(self) -> int:
        """0: every step succeeded; 2: some failed (in a dry run: cannot be prepared);
        1: none succeeded, or the bind was skipped. A worker the plan skips is bound in
        part at best (2: its host threads; 1: not even those)."""
        if self.skipped is not None:
            return EXIT_NOTHING
        bad = sum(r.status == FAILED or isinstance(r.step, Unresolved) for r in self.results)
        if self.worker_skipped is not None:
            done = sum(r.status != SKIPPED for r in self.results) - bad
            return EXIT_PARTIAL if done else EXIT_NOTHING
        if not bad:
            return EXIT_OK
        return EXIT_NOTHING if bad == len(self.results) and not self.dry_run else EXIT_PARTIAL

    @property
    def ok(self) -> bool:
        return self.exit_status == EXIT_OK

    def lines(self) -> list[str]:
        return [*(r.line for r in self.results), *self.notes]

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": formats.BIND,
            "dry_run": self.dry_run,
            "device": self.device,
            "pid": self.pid,
            "skipped": self.skipped,
            "worker_skipped": self.worker_skipped,
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "steps": [r.to_dict() for r in self.results],
            "exit_code": self.exit_status,
            "device_found": None if self.device_found is None else self.device_found.to_dict(),
        }
