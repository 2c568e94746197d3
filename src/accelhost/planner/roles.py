"""Extra roles inside a pool: CPUs kept for device interrupts and for named threads.

Works on any plan by carving from `main`: on a GPU plan `main` is the whole pool, so IRQ
CPUs are the first K of the pool and thread roles come from its end; on an Ascend plan the
same cut applies on top of the default split (its SQ/CQ IRQ, ACL and release CPUs stay).
Interrupt CPUs come first because the IRQ step writes masks in pool order, and thread
roles from the end so that `main` stays one contiguous run where the pool is one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from accelhost.errors import PlanError
from accelhost.plans import DevicePlan, Plan, ThreadRole

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def parse_thread_role(text: str) -> tuple[str, str, int]:
    """`NAME=PATTERN:COUNT` -> (name, pattern, count); PlanError saying what is wrong.

    The pattern is a regular expression searched in thread names and may itself contain
    `=` or `:`: the name ends at the first `=`, the count starts after the last `:`.
    """
    usage = f"--thread-role {text!r}: expected NAME=PATTERN:COUNT, e.g. nccl=^NCCL:2"
    name, eq, rest = text.partition("=")
    pattern, colon, count_text = rest.rpartition(":")
    if not eq or not colon:
        raise PlanError(usage)
    name = name.strip()
    if not _NAME_RE.match(name):
        raise PlanError(f"{usage} (name {name!r} must be a word such as nccl or zmq_io)")
    if not pattern:
        raise PlanError(f"{usage} (the pattern is empty)")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise PlanError(
            f"{usage} (pattern {pattern!r} is not a regular expression: {exc})"
        ) from None
    if not count_text.strip().isdigit() or int(count_text) < 1:
        raise PlanError(f"{usage} (COUNT {count_text!r} must be a whole number of CPUs >= 1)")
    return name, pattern, int(count_text)


def add_roles(
    plan: Plan,
    *,
    reserve_irq: int = 0,
    thread_roles: Sequence[tuple[str, str, int]] = (),
) -> Plan:
    """The plan with K IRQ CPUs and the named thread roles taken out of each device's main.

    The first `reserve_irq` CPUs of `main` join `irq`; each thread role, in the order given,
    takes the last COUNT CPUs still in `main`. PlanError when a pool would be left with no
    main CPU, or a role name repeats.
    """
    if reserve_irq < 0:
        raise PlanError(f"--reserve-irq must be 0 or more, not {reserve_irq}")
    names: list[str] = []
    for name, _pattern, count in thread_roles:
        if count < 1:
            raise PlanError(f"thread role {name!r} needs at least one CPU, not {count}")
        if name in names:
            raise PlanError(f"thread role {name!r} given twice")
        names.append(name)
    if reserve_irq == 0 and not thread_roles:
        return plan
    return replace(
        plan,
        devices=tuple(_split(dev, reserve_irq, thread_roles) for dev in plan.devices),
    )


def _split(
    dev: DevicePlan, reserve_irq: int, thread_roles: Sequence[tuple[str, str, int]]
) -> DevicePlan:
    taken = reserve_irq + sum(count for _n, _p, count in thread_roles)
    if taken >= len(dev.main):
        wants = [f"{reserve_irq} IRQ"] if reserve_irq else []
        wants += [f"{count} {name}" for name, _p, count in thread_roles]
        raise PlanError(
            f"device {dev.device}: its pool of {len(dev.pool)} CPUs has {len(dev.main)} main "
            f"CPU(s), too few for {' + '.join(wants)} CPUs and at least one main CPU"
        )
    existing = {role.name for role in dev.thread_roles}
    for name, _p, _c in thread_roles:
        if name in existing:
            raise PlanError(f"device {dev.device} already has a thread role {name!r}")
    main = list(dev.main)
    irq = tuple(dev.irq) + tuple(main[:reserve_irq])
    main = main[reserve_irq:]
    roles = list(dev.thread_roles)
    for name, pattern, count in thread_roles:
        cpus = main[-count:]
        main = main[:-count]
        roles.append(ThreadRole(name, pattern, tuple(cpus)))
    return replace(dev, irq=irq, main=tuple(main), thread_roles=tuple(roles))
