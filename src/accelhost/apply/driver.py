"""The one bind driver: `bind`, `exec`, `run --bind` and `bind_current_process` each only
gather their input and call `bind`, so that the four ways of binding cannot drift apart.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from accelhost.apply.build import BindOptions, Prepared, build_bind, build_exec, host_thread_steps
from accelhost.apply.execute import execute, plan_only
from accelhost.apply.steps import ApplyReport, StepResult, ThreadAffinity
from accelhost.apply.threads import thread_steps
from accelhost.apply.traps import online_cpus
from accelhost.cpulist import format_cpulist
from accelhost.errors import ApplyError, ForeignPlanError, PlanError
from accelhost.family import ASCEND_FAMILIES
from accelhost.host.live import live_host
from accelhost.parsers.sysfs import PCI_DEVICES
from accelhost.planner.roles import RoleSpec, add_roles
from accelhost.plans import Plan, PlannedHost, ThreadRole, read_hostname
from accelhost.readers.cpus import read_sysfs_nodes

if TYPE_CHECKING:
    from accelhost.apply.identity import Identified
    from accelhost.host.base import Host

NON_ARM = "CPU binding skipped: non-ARM CPU detected."
# The reference's test of `uname -m`, lower-cased: these names, or any starting with "arm"
# (armv8l, armv8b, armv7l, armv6l, ...: 32-bit ARM kernels and compat personalities too).
ARM_MACHINES = ("aarch64", "arm64")
# Threads an engine starts while we pin: list again this many times at most. An engine
# that keeps starting threads is not warmed up yet; what comes later `verify` will name.
RETRY_ROUNDS = 3
FORCE = "--force (allow_foreign=True) applies it anyway"


def differences(
    made: PlannedHost,
    plan: Plan,
    online: Sequence[int] | None,
    nodes: Sequence[int] | None,
    pci: Collection[str] | None,
) -> list[str]:
    """What of the plan's host is not so here: CPUs not online here, other NUMA nodes, a PCI
    address this host lacks; a fact this host does not show (None) is not compared."""
    out: list[str] = []
    if online is not None:
        here = set(online)
        missing = [c for c in made.allowed_cpus if c not in here]
        if missing:
            out.append(
                f"its CPUs {format_cpulist(missing)} are not online here "
                f"(here: {format_cpulist(online)})"
            )
    if nodes is not None and made.numa_nodes and tuple(nodes) != tuple(made.numa_nodes):
        there = format_cpulist(made.numa_nodes)
        out.append(f"NUMA nodes {there} there, {format_cpulist(nodes)} here")
    if pci is not None:
        here_pci = {p.lower() for p in pci}
        out += [
            f"device {d.device}'s PCI address {d.pci} is not on this host"
            for d in plan.devices
            if d.pci and d.pci.strip().lower() not in here_pci
        ]
    return out


def foreign(plan: Plan) -> ForeignPlanError | None:
    """Why `plan` was made for another host; None when it is this host's, or has no `host`.
    The hardware recorded in `Plan.host` and each device's `pci` decide; the hostname is only
    named: a container has one of its own, and a plan is as good on a twin machine."""
    made = plan.host
    if made is None:
        return None
    h = live_host()
    node_cpus = read_sysfs_nodes(h)
    pci = h.list_dir(PCI_DEVICES) or None  # no sysfs here: nothing to compare
    diffs = differences(made, plan, online_cpus(h), sorted(node_cpus) or None, pci)
    if not diffs:
        return None
    here = read_hostname(h) or "unnamed"
    return ForeignPlanError(made.hostname or "unnamed", here, tuple(diffs), FORCE)


def refuse_foreign(plan: Plan, allow_foreign: bool) -> None:
    """ForeignPlanError (exit 1) for a plan made for another host, unless `allow_foreign`."""
    if not allow_foreign and (why := foreign(plan)) is not None:
        raise why


def arch_skip(plan: Plan, any_arch: bool, machine: str | None = None) -> str | None:
    """Why this plan is not bound on this host (the reference's sentence: it binds Ascend
    where `uname -m` is ARM), or None; `any_arch`: naming a pid or a command is asking."""
    if any_arch or plan.device_type not in ASCEND_FAMILIES:
        return None
    name = (machine or os.uname().machine).lower()
    return None if name in ARM_MACHINES or name.startswith("arm") else NON_ARM


def with_roles(plan: Plan, device: int, roles: Sequence[RoleSpec] = ()) -> Plan:
    """The plan with extra thread roles added to `device` by the planner's own `add_roles`,
    so `nccl=^NCCL:2` means the same CPUs in `plan` and `bind` (PlanError for an unknown
    device, or for roles on a device whose worker plan was skipped: it has no CPUs to give)."""
    skipped = plan.worker_skip(device)
    if skipped is not None:
        if roles:
            raise PlanError(
                f"--thread-role: device {device} has no CPUs in this plan (worker CPU "
                f"binding skipped: {skipped})"
            )
        return plan
    plan.device(device)  # add_roles checks the device only when it adds a role
    return add_roles(plan, thread_roles=roles, device=device)


def role_warnings(roles: Sequence[ThreadRole], got: set[str], pid: int) -> list[str]:
    """One warning per role that no thread of `pid` got (`got`: the roles given out)."""
    return [
        f"thread role {role.name!r} (pattern {role.pattern!r}) matched no thread of process "
        f"{pid}: CPUs {format_cpulist(role.cpus)} stay unused (bind after the engine has "
        "started these threads)"
        for role in roles
        if role.cpus and role.name != "host" and role.name not in got
    ]


def bind(
    plan: Plan,
    device: int,
    options: BindOptions,
    *,
    argv: Sequence[str] | None = None,
    roles: Sequence[RoleSpec] = (),
    dry_run: bool = False,
    any_arch: bool = False,
    host: Host | None = None,
    found: Identified | None = None,
) -> ApplyReport:
    """Bind `options.pid` (threads, memory) and the device's IRQs, or with `argv` this
    process for the command the caller then execs. AccelhostError for input that cannot be
    bound at all; a step that fails is a result, not an exception."""
    plan = with_roles(plan, device, roles)  # an unknown device or bad role: before anything
    refuse_foreign(plan, options.allow_foreign)
    pid = options.pid if argv is None else os.getpid()
    worker_skipped = plan.worker_skip(device)
    why = f"worker CPU binding skipped for device {device}: {worker_skipped}"
    skip = arch_skip(plan, any_arch)
    if skip is None and worker_skipped is not None and argv is not None:
        skip = why  # `exec` pins no host threads for a skipped worker: it starts unbound
    if skip is not None:
        return ApplyReport(
            skipped=skip, device=device, pid=pid, dry_run=dry_run, device_found=found
        )
    if worker_skipped is not None:
        prepared = _host_threads_only(plan, options, why)
    elif argv is not None:
        prepared = _exec_notes(plan, device, build_exec(plan, device, list(argv), options, host))
    else:
        prepared = build_bind(plan, device, options, host)
    results = plan_only(prepared.steps) if dry_run else run_steps(prepared, pid, host)
    warnings = list(prepared.warnings)
    if argv is None and pid is not None and options.threads:
        got = {r.step.role for r in results if type(r.step) is ThreadAffinity and r.step.pid == pid}
        warnings += role_warnings(prepared.roles, got, pid)
    return ApplyReport(
        results=tuple(results),
        warnings=tuple(warnings),
        notes=prepared.notes,
        dry_run=dry_run,
        device=device,
        pid=pid,
        device_found=found,
        worker_skipped=worker_skipped,
    )


def _host_threads_only(plan: Plan, options: BindOptions, why: str) -> Prepared:
    """A device whose worker plan was skipped: like the reference, leave the worker as it
    is (threads, memory) and pin the host's UVB poll threads, whoever owns them."""
    warnings = [f"{why} Only the host's threads are bound."]
    if not (options.threads and options.host_threads):
        return Prepared((), tuple(warnings))
    steps, more = host_thread_steps(live_host(), plan, None)
    return Prepared(tuple(steps), (*warnings, *more))


def run_steps(prepared: Prepared, pid: int | None, host: Host | None) -> list[StepResult]:
    """Execute the steps; after the process's own thread steps, pin threads born meanwhile."""
    steps = prepared.steps
    own = (i for i, s in enumerate(steps) if not (isinstance(s, ThreadAffinity) and s.pid == pid))
    n = next(own, len(steps))  # the process's own thread steps come first
    results = execute(steps[:n], host)
    if pid is not None and n:
        seen = {s.tid for s in steps[:n] if isinstance(s, ThreadAffinity)}
        for _ in range(RETRY_ROUNDS):
            try:
                new = thread_steps(pid, prepared.main, prepared.roles, skip=seen)
            except ApplyError:  # the process exited meanwhile: its results say so
                break
            if not new:
                break
            seen.update(s.tid for s in new)
            results += execute(new, host)
    results += execute(steps[n:], host)
    return results


def _exec_notes(plan: Plan, device: int, prepared: Prepared) -> Prepared:
    """Thread roles cannot be applied before their threads exist: their COUNT CPUs are kept
    out of `main`, and a note says to pin them later with `bind`."""
    notes = [
        f"thread role {role.name!r}: CPUs {format_cpulist(role.cpus)} are kept for threads "
        f"matching {role.pattern!r}; pin them once they exist (`accelhost bind` or "
        "accelhost.bind_current_process)"
        for role in plan.device(device).thread_roles
    ]
    return replace(prepared, notes=(*prepared.notes, *notes))
