"""Does reality still match the plan? Thread affinities, IRQ masks, where memory lives.

Threads created after binding inherit their creator's CPUs, and irqbalance or an operator
may move IRQs: one line per thread or IRQ that drifted, naming both values.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from accelhost import formats
from accelhost.apply import traps
from accelhost.apply.build import BindOptions, device_irqs, host_thread_steps, roles_of, target_node
from accelhost.apply.driver import role_warnings
from accelhost.apply.irq import read_mask
from accelhost.apply.memory import kb_per_node, parse_numa_regions, read_proc
from accelhost.apply.steps import ThreadAffinity
from accelhost.apply.threads import thread_steps
from accelhost.cpulist import cpu_mask, format_cpulist, parse_cpu_mask
from accelhost.formats import human_bytes
from accelhost.host.live import live_host
from accelhost.plans import Plan


@dataclass(frozen=True)
class Drift:
    kind: str  # "thread" or "irq"
    id: int
    name: str
    expected: str
    actual: str

    @property
    def line(self) -> str:
        what, plan = ("thread", "plan CPUs") if self.kind == "thread" else ("IRQ", "plan")
        values = f"{plan} {self.expected}, actual {self.actual}"
        return f"{what} {self.id} ({self.name}) drifted: {values}"


@dataclass(frozen=True)
class Placement:
    """Where the process's resident memory is, in bytes per NUMA node (huge pages at their
    size), against the node the plan names (None: it names none)."""

    node: int | None
    resident_bytes: dict[int, int]

    @property
    def on_node_share(self) -> float | None:
        total = sum(self.resident_bytes.values())
        if self.node is None or not total:
            return None
        return self.resident_bytes.get(self.node, 0) / total

    @property
    def line(self) -> str:
        per_node = ", ".join(f"N{n} {human_bytes(b)}" for n, b in self.resident_bytes.items())
        share = self.on_node_share
        if share is None:
            return f"memory: resident {per_node or 'nothing'} (plan names no NUMA node)"
        return f"memory: {share * 100:.0f}% of resident memory on node {self.node} ({per_node})"

    def to_dict(self) -> dict[str, Any]:
        share = self.on_node_share
        return {
            "node": self.node,
            "resident_bytes": {str(n): b for n, b in self.resident_bytes.items()},
            "on_node_share": None if share is None else round(share, 4),
        }


@dataclass(frozen=True)
class VerifyReport:
    drifts: tuple[Drift, ...]
    checked_threads: int
    checked_irqs: int
    info: tuple[str, ...]
    memory: Placement | None = None  # None: not checked (no --pid, or not readable)

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    @property
    def exit_status(self) -> int:
        """1: drift; 2: nothing could be checked (an IRQ lookup that failed, threads gone),
        which is "cannot tell", never a match; 0: all that was checked matches."""
        if self.drifts:
            return 1
        return 0 if self.checked_threads or self.checked_irqs else 2

    def lines(self) -> list[str]:
        out = [d.line for d in self.drifts]
        verdict = {0: "match", 1: "DRIFT", 2: "cannot tell"}[self.exit_status]
        out.append(
            f"{verdict}: {self.checked_threads} threads and {self.checked_irqs} IRQs checked, "
            f"{len(self.drifts)} drifted"
        )
        return out + list(self.info) + ([self.memory.line] if self.memory else [])

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": formats.VERIFY,
            "ok": self.ok,
            "exit_code": self.exit_status,
            "checked_threads": self.checked_threads,
            "checked_irqs": self.checked_irqs,
            "drifts": [{**asdict(d), "line": d.line} for d in self.drifts],
            "info": list(self.info),
            "memory": None if self.memory is None else self.memory.to_dict(),
        }


def verify(plan: Plan, device: int, options: BindOptions) -> VerifyReport:
    """A device whose worker plan was skipped (Ascend 950) has only host threads to check."""
    skipped = plan.worker_skip(device)
    dev = None if skipped is not None else plan.device(device)
    drifts: list[Drift] = []
    info = [] if skipped is None else [f"worker CPU binding skipped for device {device}: {skipped}"]
    pid = options.pid
    live = live_host()
    checks: list[ThreadAffinity] = []
    if dev is not None and pid is not None and options.threads:
        roles = roles_of(plan, dev)
        checks += thread_steps(pid, dev.main, roles)
        given = {t.role for t in checks}
        info.extend(f"warning: {w}" for w in role_warnings(roles, given, pid))
        planned = [*dev.main, *(c for r in roles for c in r.cpus)]
        info.extend(f"warning: {w}" for w in traps.clobber_warnings(pid, planned, live))
    if options.threads and options.host_threads:
        # The process's own host threads are among its threads above: checked once.
        checks += host_thread_steps(live, plan, pid if dev is not None else None)[0]
    threads = 0
    for t in checks:
        try:
            actual = os.sched_getaffinity(t.tid)
        except OSError:  # exited meanwhile
            continue
        threads += 1
        if actual != set(t.cpus):
            expected = f"{format_cpulist(t.cpus)} [{t.role}]"
            drifts.append(Drift("thread", t.tid, t.name, expected, format_cpulist(actual)))
    irqs = 0
    if dev is not None and options.irq and dev.irq and plan.device_type != "950":
        found, problem = device_irqs(plan, dev, options.host_root, None, live)
        if problem is not None:
            info.append(f"IRQs not checked: {problem}")
        for i in found:
            now = read_mask(live, options.host_root, i.irq)
            if now is None:
                info.append(f"IRQ {i.irq} ({i.purpose}): mask not readable")
                continue
            irqs += 1
            got = parse_cpu_mask(now)
            if set(got) != set(i.cpus):
                expected = f"{cpu_mask(i.cpus)} (CPUs {format_cpulist(i.cpus)})"
                seen = f"{now} (CPUs {format_cpulist(got)})"
                drifts.append(Drift("irq", i.irq, i.purpose, expected, seen))
    placement = None
    if dev is not None and pid is not None and options.memory:
        placement = _placement(pid, target_node(dev, options.host_root), options.host_root)
        if placement is None:
            info.append("memory: /proc/<pid>/numa_maps not readable; placement not checked")
    return VerifyReport(tuple(drifts), threads, irqs, tuple(info), placement)


def _placement(pid: int, node: int | None, root: str) -> Placement | None:
    text = read_proc(pid, "numa_maps", root)
    if not text:
        return None
    per_node = kb_per_node(parse_numa_regions(text))
    if not any(per_node.values()):
        return None  # nothing resident: no placement to judge
    return Placement(node, {n: kb * formats.KIB for n, kb in per_node.items()})
