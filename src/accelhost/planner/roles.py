"""Extra roles inside a pool: CPUs kept for device interrupts and for named threads.

Also the one grammar of `--thread-role` (`parse_role_spec`) for every command (plan,
bind, exec, verify, run --bind).

A COUNT role is carved from `main`: on a GPU plan `main` is the whole pool, so IRQ CPUs
are the first K of the pool and thread roles come from its end; on an Ascend plan the
same cut applies on top of the default split (its SQ/CQ IRQ, ACL and release CPUs stay).
Interrupt CPUs come first because the IRQ step writes masks in pool order, and thread
roles from the end so that `main` stays one contiguous run where the pool is one. A
CPULIST role leaves `main` as it is: the user said exactly where those threads go.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from accelhost.cpulist import parse_cpulist
from accelhost.errors import ParseError, PlanError, UsageError
from accelhost.plans import DevicePlan, Plan, ThreadRole

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# What may follow the last `@` of a CPULIST role: the kernel's list grammar, strides too.
_CPULIST_RE = re.compile(r"^[0-9][0-9,:\s-]*$")
# One short word in the usage line: the two grammars made it 80 columns alone.
ROLE_METAVAR = "ROLE"
ROLE_HELP = (
    "ROLE is NAME=PATTERN:COUNT or NAME=PATTERN@CPULIST: "
    "also pin threads whose name matches PATTERN (a regular expression, searched) to COUNT "
    "CPUs taken from the end of the device's main CPUs, or to the CPUs of CPULIST (e.g. "
    "5, 40-41, 0-10:2; main is left as it is); repeatable, later roles win"
)


class RoleSpec(NamedTuple):
    """One `--thread-role`: `ncpus` CPUs of the pool, or exactly `cpus` when given."""

    name: str
    pattern: str
    ncpus: int = 0
    cpus: tuple[int, ...] = ()


def parse_role_spec(text: str) -> RoleSpec:
    """`NAME=PATTERN:COUNT` or `NAME=PATTERN@CPULIST`; UsageError saying what is wrong.
    The name ends at the first `=`, the CPU list or count after the last `@` or `:`."""
    usage = (
        f"--thread-role {text!r}: expected NAME=PATTERN:COUNT (COUNT CPUs of the pool, "
        "e.g. nccl=^NCCL:2) or NAME=PATTERN@CPULIST (e.g. nccl=^NCCL@40-41)"
    )
    name, eq, rest = text.partition("=")
    name = name.strip()
    if not eq:
        raise UsageError(usage)
    if not _NAME_RE.match(name):
        raise UsageError(f"{usage}; the name {name!r} must be a word such as nccl or zmq_io")
    at_pattern, at, cpu_text = rest.rpartition("@")
    if at and _CPULIST_RE.match(cpu_text.strip()):
        pattern = _pattern(at_pattern, usage)
        try:
            cpus = tuple(sorted(set(parse_cpulist(cpu_text, "--thread-role CPULIST"))))
        except ParseError as exc:
            raise UsageError(f"{usage}; {exc}") from None
        if not cpus:
            raise UsageError(f"{usage}; the CPU list {cpu_text!r} names no CPU")
        return RoleSpec(name, pattern, 0, cpus)
    pattern_text, colon, count_text = rest.rpartition(":")
    if not colon:
        raise UsageError(usage)
    pattern = _pattern(pattern_text, usage)
    count_text = count_text.strip()
    if not count_text.isdigit() or int(count_text) < 1:
        raise UsageError(
            f"{usage}; COUNT {count_text!r} must be a whole number of CPUs >= 1 "
            "(a CPU list is written after @)"
        )
    return RoleSpec(name, pattern, int(count_text))


def _pattern(text: str, usage: str) -> str:
    if not text:
        raise UsageError(f"{usage}; the pattern is empty")
    try:
        re.compile(text)
    except re.error as exc:
        raise UsageError(f"{usage}; pattern {text!r} is not a regular expression: {exc}") from None
    return text


def add_roles(
    plan: Plan,
    *,
    reserve_irq: int = 0,
    thread_roles: Sequence[RoleSpec] = (),
    device: int | None = None,
) -> Plan:
    """The plan with K IRQ CPUs and the thread roles added to each device (or only to
    `device`, so a plan file's other devices need not have room for them); PlanError when
    a pool would be left with no main CPU, or a role name repeats."""
    if reserve_irq < 0:
        raise PlanError(f"--reserve-irq must be 0 or more, not {reserve_irq}")
    names: list[str] = []
    for spec in thread_roles:
        if spec.ncpus < 1 and not spec.cpus:
            raise PlanError(f"thread role {spec.name!r} needs at least one CPU, not {spec.ncpus}")
        if spec.name in names:
            raise PlanError(f"thread role {spec.name!r} given twice")
        names.append(spec.name)
    if reserve_irq == 0 and not thread_roles:
        return plan
    if device is not None:
        plan.device(device)  # PlanError naming the planned devices
    devices = tuple(
        _split(dev, reserve_irq, thread_roles) if device in (None, dev.device) else dev
        for dev in plan.devices
    )
    return replace(plan, devices=devices)


def _split(dev: DevicePlan, reserve_irq: int, specs: Sequence[RoleSpec]) -> DevicePlan:
    counted = [s for s in specs if not s.cpus]
    taken = reserve_irq + sum(s.ncpus for s in counted)
    if taken and taken >= len(dev.main):
        wants = [f"{reserve_irq} IRQ"] if reserve_irq else []
        wants += [f"{s.ncpus} {s.name}" for s in counted]
        raise PlanError(
            f"device {dev.device}: its pool of {len(dev.pool)} CPUs has {len(dev.main)} main "
            f"CPU(s), too few for {' + '.join(wants)} CPUs and at least one main CPU"
        )
    irq, main = dev.irq + dev.main[:reserve_irq], dev.main[reserve_irq:]
    roles = list(dev.thread_roles)
    for spec in specs:
        if any(role.name == spec.name for role in dev.thread_roles):
            raise PlanError(f"device {dev.device} already has a thread role {spec.name!r}")
        cpus = spec.cpus
        if not cpus:
            main, cpus = main[: -spec.ncpus], main[-spec.ncpus :]
        roles.append(ThreadRole(spec.name, spec.pattern, cpus))
    return replace(dev, irq=irq, main=main, thread_roles=tuple(roles))
