"""The doctor's checks: pure functions from `HostFacts` to a `CheckResult`.

Each result carries the evidence a script can act on (one object per process with an
integer `pid`, per segment with an integer `shmid`, per device) and the fix in words.
Evidence lists only what is wrong, except `device_holders`, which lists every holder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.options import HygieneOptions, is_control_node
from accelhost.hygiene.preflight import DevicePreflight, device_holders_of, preflight_from_facts
from accelhost.hygiene.rules import find_orphans, is_hugetlb, leaked_segments, segment_idle_s
from accelhost.hygiene.text import human_bytes
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.procs import ProcessInfo

OK, WARN, FAIL, UNKNOWN = "OK", "WARN", "FAIL", "UNKNOWN"
STATUS_ORDER = {OK: 0, WARN: 1, FAIL: 2, UNKNOWN: 3}
CHECK_NAMES = (
    "orphan_engines",
    "device_holders",
    "unattributed_memory",
    "shared_memory",
    "hugepages",
    "preflight",
    "host_tuning",
)


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    summary: str
    evidence: tuple[dict[str, Any], ...] = ()
    fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[CheckResult, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        """0 all OK or WARN, 1 any FAIL, 2 a check could not run (Node Problem Detector)."""
        statuses = {c.status for c in self.checks}
        if FAIL in statuses:
            return 1
        if UNKNOWN in statuses:
            return 2
        return 0

    def get(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        worst = max((c.status for c in self.checks), key=STATUS_ORDER.__getitem__, default=OK)
        return {"status": worst, "checks": [c.to_dict() for c in self.checks]}


def process_evidence(proc: ProcessInfo, facts: HostFacts, **extra: Any) -> dict[str, Any]:
    age = facts.process_age_s(proc)
    mem = device_memory_of_pid(facts, proc.pid)
    return {
        "kind": "process",
        "pid": proc.pid,
        "ppid": proc.ppid,
        "pgid": proc.pgid,
        "sid": proc.sid,
        "state": proc.state,
        "cmdline": proc.command,
        "age_s": None if age is None else round(age, 1),
        "devices": list(facts.device_fds.get(proc.pid, ())),
        "device_memory_mib": mem,
        **extra,
    }


def device_memory_of_pid(facts: HostFacts, pid: int) -> int | None:
    values = [
        row.memory_mib
        for dev in facts.devices
        for row in dev.processes
        if row.pid == pid and row.memory_mib is not None
    ]
    return sum(values) if values else None


def segment_evidence(seg: ShmSegment, facts: HostFacts, reason: str) -> dict[str, Any]:
    idle = segment_idle_s(seg, facts.now_epoch)
    age = None if facts.now_epoch is None else max(0.0, facts.now_epoch - seg.ctime)
    return {
        "kind": "segment",
        "shmid": seg.shmid,
        "key": seg.key_hex,
        "bytes": seg.size,
        "creator_pid": seg.cpid,
        "last_pid": seg.lpid,
        "nattch": seg.nattch,
        "uid": seg.uid,
        "age_s": None if age is None else round(age),
        "idle_s": None if idle is None else round(idle),
        "hugetlb": is_hugetlb(seg),
        "reason": reason,
    }


def _unknown(name: str, why: str) -> CheckResult:
    return CheckResult(name, UNKNOWN, f"could not run: {why}", (), "")


def check_orphan_engines(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "orphan_engines"
    if facts.processes is None:
        return _unknown(name, facts.errors.get("processes", "no process table"))
    orphans = find_orphans(facts.processes, facts.self_pid, options)
    if not orphans:
        return CheckResult(name, OK, "no engine process outlived its launcher")
    evidence = tuple(process_evidence(o.proc, facts, reason=o.reason) for o in orphans)
    stuck = [o.proc.pid for o in orphans if o.proc.is_uninterruptible]
    fix = "accelhost clean --yes (SIGTERM to each orphan's group, SIGKILL after --grace)"
    if stuck:
        fix += f"; pids {' '.join(map(str, stuck))} are in D state: they need a device reset"
    held = [o for o in orphans if facts.device_fds.get(o.proc.pid)]
    return CheckResult(
        name,
        FAIL,
        f"{len(orphans)} orphan engine process(es), {len(held)} holding a device",
        evidence,
        fix,
    )


def _holders(facts: HostFacts) -> dict[int, set[str]]:
    """pid -> device names it holds, from open nodes and from the vendor tools' tables."""
    out: dict[int, set[str]] = {pid: set(nodes) for pid, nodes in facts.device_fds.items()}
    for dev in facts.devices:
        for row in dev.processes:
            out.setdefault(row.pid, set()).add(dev.node)
    return out


def check_device_holders(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "device_holders"
    if facts.processes is None and not facts.devices:
        return _unknown(name, facts.errors.get("processes", "no process table"))
    procs = facts.processes or {}
    regex = options.engine_regex()
    holders = _holders(facts)
    evidence: list[dict[str, Any]] = []
    bad: list[str] = []
    by_device: dict[str, dict[int, list[int]]] = {}  # node -> pgid -> engine pids
    for pid in sorted(holders):
        nodes = sorted(holders[pid])
        proc = procs.get(pid)
        if proc is None:
            visible = facts.processes is not None
            evidence.append(
                {
                    "kind": "process",
                    "pid": pid,
                    "cmdline": "?",
                    "state": None,
                    "devices": nodes,
                    "device_memory_mib": device_memory_of_pid(facts, pid),
                    "note": "listed by the device tool but not in /proc"
                    + (" (exited, or another PID namespace)" if visible else ""),
                }
            )
            continue
        engine = bool(regex and proc.cmdline and regex.search(proc.command))
        ev = process_evidence(proc, facts, engine=engine)
        ev["devices"] = nodes
        evidence.append(ev)
        if proc.is_zombie or proc.is_uninterruptible:
            bad.append(f"pid {pid} is {'a zombie' if proc.is_zombie else 'in D state'}")
        if engine:
            for node in nodes:
                if not is_control_node(node):
                    by_device.setdefault(node, {}).setdefault(proc.pgid, []).append(pid)
    shared = {n: g for n, g in by_device.items() if len(g) > 1}
    if bad:
        return CheckResult(
            name,
            FAIL,
            "; ".join(bad) + " while holding a device",
            tuple(evidence),
            "a zombie's parent must reap it; a D-state holder needs a device reset "
            "(npu-smi set -t reset -i N / nvidia-smi -r -i N)",
        )
    if shared:
        text = "; ".join(
            f"{node}: {len(groups)} engines (groups {', '.join(map(str, sorted(groups)))})"
            for node, groups in sorted(shared.items())
        )
        return CheckResult(
            name, WARN, text, tuple(evidence), "run one engine per device (one vLLM per NPU)"
        )
    count_devices = len({n for nodes in holders.values() for n in nodes})
    return CheckResult(
        name,
        OK,
        f"{len(holders)} process(es) hold {count_devices} device node(s)"
        if holders
        else "no process holds a device node",
        tuple(evidence),
    )


def check_unattributed_memory(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "unattributed_memory"
    for source in ("devices", "device_processes"):
        if source in facts.errors:
            return _unknown(name, facts.errors[source])
    if not facts.device_sources:
        return CheckResult(
            name, OK, "no device memory source on this host (no npu-smi, nvidia-smi)"
        )
    evidence = []
    for dev in facts.devices:
        # a process row without a memory figure ([N/A]) makes the rest unknowable
        if dev.used_mib is None or any(row.memory_mib is None for row in dev.processes):
            continue
        attributed = sum(row.memory_mib or 0 for row in dev.processes)
        baseline = options.baseline_mib(dev.vendor)
        extra = dev.used_mib - attributed
        if extra > baseline:
            evidence.append(
                {
                    "kind": "device",
                    "device": dev.label,
                    "index": dev.index,
                    "used_mib": dev.used_mib,
                    "total_mib": dev.total_mib,
                    "attributed_mib": attributed,
                    "unattributed_mib": extra,
                    "baseline_mib": baseline,
                    "holders": [h.to_dict() for h in device_holders_of(dev, facts)],
                }
            )
    if not evidence:
        return CheckResult(name, OK, f"{len(facts.devices)} device(s): memory accounted for")
    text = ", ".join(f"{e['device']} {e['unattributed_mib']} MiB" for e in evidence)
    return CheckResult(
        name,
        WARN,
        f"memory in use by no listed process: {text}",
        tuple(evidence),
        "look for orphans and leaked segments (accelhost clean); if none, the driver holds "
        "it: restart the driver or reset the device when it is idle",
    )


def check_shared_memory(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "shared_memory"
    if facts.segments is None:
        return _unknown(name, facts.errors.get("segments", "segment table not read"))
    if facts.processes is None:
        return _unknown(name, "no process table: cannot tell whether creators live")
    leaks = leaked_segments(facts.segments, facts.alive, facts.now_epoch, options.shm_min_age_s)
    if not leaks:
        return CheckResult(name, OK, f"{len(facts.segments)} segment(s), none leaked")
    total = sum(s.size for s, _ in leaks)
    huge = sum(1 for s, _ in leaks if is_hugetlb(s))
    evidence = tuple(segment_evidence(s, facts, v.reason) for s, v in leaks)
    return CheckResult(
        name,
        WARN,
        f"{len(leaks)} leaked segment(s), {human_bytes(total)}"
        + (f", {huge} HugePages-backed" if huge else ""),
        evidence,
        "accelhost clean --yes (removes exactly these shmids, re-checked at removal)",
    )


def check_hugepages(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "hugepages"
    if facts.hugepage_pools is None:
        return _unknown(name, facts.errors.get("hugepages", "HugePages not read"))
    pools = [p for p in facts.hugepage_pools if p.total > 0]
    if not pools:
        return CheckResult(name, OK, "no HugePages reserved on this host")
    leaks = (
        leaked_segments(facts.segments, facts.alive, facts.now_epoch, options.shm_min_age_s)
        if facts.segments is not None and facts.processes is not None
        else []
    )
    evidence = []
    full = False
    for p in pools:
        frac = p.used_fraction or 0.0
        if frac >= options.hugepages_threshold:
            full = full or frac >= 1.0
            evidence.append(
                {
                    "kind": "hugepages",
                    "size": p.size_label,
                    "node": p.node,
                    "total": p.total,
                    "free": p.free,
                    "reserved": p.reserved,
                    "used_pct": round(frac * 100, 1),
                }
            )
    if not evidence:
        return CheckResult(
            name, OK, f"{len(pools)} pool(s) below {options.hugepages_threshold:.0%}"
        )
    text = ", ".join(
        f"{e['size']}{'' if e['node'] is None else ' node' + str(e['node'])} {e['used_pct']}%"
        for e in evidence
    )
    if full and leaks:
        return CheckResult(
            name,
            FAIL,
            f"HugePages exhausted with {len(leaks)} leaked segment(s): {text}",
            tuple(evidence),
            "accelhost clean --yes (leaked segments pin HugePages until removed)",
        )
    return CheckResult(
        name,
        WARN,
        f"HugePages above {options.hugepages_threshold:.0%}: {text}",
        tuple(evidence),
        "check the pool size (vm.nr_hugepages) against the engines' needs",
    )


def check_preflight(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "preflight"
    if options.expect_util is None:
        return CheckResult(name, OK, "not requested (--expect-util U [--device N])")
    report = preflight_from_facts(facts, options.expect_util, options.device)
    if report.status == UNKNOWN:
        return _unknown(name, report.reason)
    evidence = tuple(d.to_dict() for d in report.devices if not d.ok) if not report.ok else ()
    if report.ok:
        return CheckResult(name, OK, report.reason)
    worst = [d for d in report.devices if not d.ok]

    def held(d: DevicePreflight) -> str:
        who = ", ".join(
            f"pid {h.pid} ({h.memory_mib if h.memory_mib is not None else '?'} MiB)"
            for h in d.holders
        )
        return f"{who or 'no process'}, {d.unattributed_mib} MiB by no listed process"

    first = worst[0]
    summary = (
        f"{first.device} will not start at {first.util}: {_g(first.free_mib)} of "
        f"{_g(first.total_mib)} GiB free, {_g(first.requested_mib)} GiB wanted; "
        f"held by {held(first)}"
    )
    if len(worst) > 1:
        summary += f" (and {len(worst) - 1} more device(s))"
    return CheckResult(
        name,
        FAIL,
        summary,
        evidence,
        f"free the device (accelhost clean --yes for orphans and leaks) or start with "
        f"--gpu-memory-utilization {min(d.max_util for d in worst)} or lower",
    )


def _g(mib: float) -> float:
    return round(mib / 1024, 2)


def check_host_tuning(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "host_tuning"
    t = facts.tuning
    evidence: list[dict[str, Any]] = []
    if t.irqbalance_pids:
        pinned = [i for i in t.device_irqs if t.online_cpus and i.affinity != t.online_cpus]
        if pinned:
            evidence.append(
                {
                    "kind": "tuning",
                    "item": "irqbalance",
                    "pids": list(t.irqbalance_pids),
                    "pinned_irqs": [i.irq for i in pinned],
                    "detail": "irqbalance runs while device IRQs are pinned: it will move them",
                }
            )
    if t.thp_enabled == "always" and t.thp_defrag == "always":
        evidence.append(
            {
                "kind": "tuning",
                "item": "transparent_hugepage",
                "enabled": t.thp_enabled,
                "defrag": t.thp_defrag,
                "detail": "defrag=always compacts memory on page faults: latency stalls",
            }
        )
    if t.proc_irq_readonly:
        evidence.append(
            {
                "kind": "tuning",
                "item": "proc_irq",
                "detail": "/proc/irq is read-only here: "
                "device IRQs cannot be pinned from this container",
            }
        )
    for var, value in sorted(t.affinity_env.items()):
        evidence.append(
            {
                "kind": "tuning",
                "item": var,
                "value": value,
                "detail": f"{var} binds OpenMP threads and fights the CPU plan",
            }
        )
    n_devices = len(facts.devices)
    if (
        t.allowed_cpus is not None
        and n_devices
        and t.allowed_cpus < n_devices * options.cpus_per_device
    ):
        evidence.append(
            {
                "kind": "tuning",
                "item": "cpuset",
                "allowed_cpus": t.allowed_cpus,
                "devices": n_devices,
                "detail": f"{t.allowed_cpus} CPUs for {n_devices} devices "
                f"(under {options.cpus_per_device} per device)",
            }
        )
    procs = facts.processes or {}
    for pid, env in sorted(facts.engine_env.items()):
        if any("expandable_segments:True" in env.get(v, "") for v in env) or pid not in procs:
            continue
        evidence.append(
            process_evidence(
                procs[pid],
                facts,
                item="alloc_conf",
                detail="no expandable_segments:True in PYTORCH_NPU_ALLOC_CONF / "
                "PYTORCH_CUDA_ALLOC_CONF: device memory fragments across restarts",
            )
        )
    if not evidence:
        return CheckResult(name, OK, "nothing to tune")
    items = ", ".join(dict.fromkeys(str(e["item"]) for e in evidence))
    return CheckResult(
        name,
        WARN,
        f"host tuning: {items}",
        tuple(evidence),
        "see each item's detail; `accelhost plan` / `bind` pins CPUs and IRQs",
    )


CHECKS: dict[str, Callable[[HostFacts, HygieneOptions], CheckResult]] = {
    "orphan_engines": check_orphan_engines,
    "device_holders": check_device_holders,
    "unattributed_memory": check_unattributed_memory,
    "shared_memory": check_shared_memory,
    "hugepages": check_hugepages,
    "preflight": check_preflight,
    "host_tuning": check_host_tuning,
}


def run_checks(
    facts: HostFacts, options: HygieneOptions, only: tuple[str, ...] = ()
) -> DoctorReport:
    """Every check (or the named ones); a check that breaks is UNKNOWN, not a crash."""
    results = []
    for name in CHECK_NAMES:
        if only and name not in only:
            continue
        try:
            results.append(CHECKS[name](facts, options))
        except Exception as exc:  # a bug in one check must not hide the others
            results.append(_unknown(name, f"internal error: {type(exc).__name__}: {exc}"))
    return DoctorReport(tuple(results))


__all__ = ["CHECK_NAMES", "CheckResult", "DoctorReport", "run_checks"]
