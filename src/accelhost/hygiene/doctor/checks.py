"""The doctor's checks: pure functions from one look's `Findings` (its facts, judged once,
and whose each thing is) to a `CheckResult`.

Each result carries the evidence a script can act on (one object per process with an
integer `pid`, per segment with an integer `shmid`, per device) and the fix in words.
Evidence lists only what is wrong, except `device_holders`, which lists every holder.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from accelhost.containers.model import Container
from accelhost.formats import human_bytes, mib_bytes
from accelhost.hygiene.doctor.container_init import check_container_init
from accelhost.hygiene.doctor.evidence import (
    clean_fix,
    device_memory_of_pid,
    not_in_recording,
    orphan_evidence,
    privileged_note,
    process_evidence,
    segment_evidence,
    shm_file_evidence,
    some_pids,
    unknown,
    unreadable_evidence,
    waiting_note,
)
from accelhost.hygiene.doctor.preflight import check_preflight, check_unattributed_memory
from accelhost.hygiene.doctor.tuning import check_host_tuning
from accelhost.hygiene.facts.host import NOT_RECORDED, HostFacts
from accelhost.hygiene.judge.containers import annotate_report
from accelhost.hygiene.judge.findings import Findings, find
from accelhost.hygiene.judge.rules import is_hugetlb
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import (
    CHECK_NAMES,
    FAIL,
    OK,
    SKIP,
    UNKNOWN,
    WARN,
    CheckResult,
    DoctorReport,
)
from accelhost.parsers.devnodes import CONTROL_NODES

REAP_FIX = (
    "a zombie's parent must reap it; a D-state holder is stuck in the driver (no signal "
    "stops it, clean never retries): wait for it, or reset that device "
    "(npu-smi set -t reset -i N / nvidia-smi -r -i N)"
)


def _unreadable(facts: HostFacts) -> frozenset[int]:
    """Live processes whose open files this reader could not see (they may hold anything)."""
    return frozenset(facts.shm_held.unreadable) if facts.shm_held is not None else frozenset()


def check_orphan_engines(found: Findings, options: HygieneOptions) -> CheckResult:
    name = "orphan_engines"
    facts, orphans = found.facts, found.orphans
    if orphans is None:
        return not_in_recording(facts, name)
    if not orphans and (facts.processes_partial or facts.hidden_pids):
        # what /proc will not show this reader (hidepid) may be an orphan: cannot tell
        why = facts.processes_partial or f"{len(facts.hidden_pids)} process(es) hidden"
        return unknown(name, f"{why}; run as root (CAP_SYS_PTRACE) to see every process")
    if not orphans:
        return CheckResult(name, OK, "no engine process outlived its launcher")
    blind = _unreadable(facts)
    evidence = tuple(orphan_evidence(o, facts, o.proc.pid in blind) for o in orphans)
    stuck = [o.proc.pid for o in orphans if o.proc.is_uninterruptible]
    what = "SIGTERM to each orphan and its descendants, SIGKILL after --grace"
    fix = clean_fix(options, facts.live, what, "orphans")
    if stuck:
        fix += f"; pids {_in_containers(found, stuck)} are in D state (stuck in the driver: "
        fix += "no signal can stop them, clean will not retry): wait, or reset that device"
    held = [o for o in orphans if facts.device_fds.get(o.proc.pid)]
    unseen = [o for o in orphans if o.proc.pid in blind]
    summary = f"{len(orphans)} orphan engine process(es), {len(held)} holding a device"
    if unseen:
        summary += f", {len(unseen)} whose open files cannot be read (run as root)"
    return CheckResult(name, FAIL, summary, evidence, fix)


def _in_containers(found: Findings, pids: list[int]) -> str:
    """`2290107 (in vllm-bash (docker 3f9a1c2e4b5d))`: pids, with the container of each."""
    of = found.attribution.container_of
    return " ".join(f"{pid} (in {c.label})" if (c := of(pid)) else f"{pid}" for pid in pids)


def _holders(facts: HostFacts) -> dict[int, set[str]]:
    """pid -> device names it holds, from open nodes and from the vendor tools' tables."""
    out: dict[int, set[str]] = {pid: set(nodes) for pid, nodes in facts.device_fds.items()}
    for dev in facts.devices:
        for row in dev.processes:
            out.setdefault(row.pid, set()).add(dev.node)
    return out


def check_device_holders(found: Findings, options: HygieneOptions) -> CheckResult:
    name = "device_holders"
    facts = found.facts
    if facts.processes is None and not facts.devices:
        return not_in_recording(facts, name)
    procs = facts.processes or {}
    is_engine = options.catalog.is_engine
    holders = _holders(facts)
    evidence: list[dict[str, Any]] = []
    bad: list[str] = []
    by_device: dict[str, dict[int, list[int]]] = {}  # node -> pgid -> engine pids
    for pid in sorted(holders):
        nodes = sorted(holders[pid])
        proc = procs.get(pid)
        if proc is None:
            why = " (exited, or another PID namespace)" if facts.processes is not None else ""
            evidence.append(
                {
                    "kind": "process",
                    "pid": pid,
                    "cmdline": "?",
                    "state": None,
                    "devices": nodes,
                    "device_memory_bytes": mib_bytes(device_memory_of_pid(facts, pid)),
                    "note": f"listed by the device tool but not in /proc{why}",
                }
            )
            continue
        engine = bool(proc.cmdline) and is_engine(proc.command)
        evidence.append(process_evidence(proc, facts, engine=engine, devices=nodes))
        if proc.is_zombie or proc.is_uninterruptible:
            what = "a zombie" if proc.is_zombie else "in D state (stuck in the driver)"
            bad.append(f"pid {_in_containers(found, [pid])} is {what}")
        for node in [n for n in nodes if engine and n not in CONTROL_NODES]:
            by_device.setdefault(node, {}).setdefault(proc.pgid, []).append(pid)
    shared = {n: g for n, g in by_device.items() if len(g) > 1}
    if facts.shm_held is not None:
        evidence.extend(unreadable_evidence(facts.shm_held, "a device node"))
    ev = tuple(evidence)
    if bad:
        return CheckResult(name, FAIL, "; ".join(bad) + " while holding a device", ev, REAP_FIX)
    if shared:
        text = "; ".join(
            f"{node}: {len(groups)} engines (groups {', '.join(map(str, sorted(groups)))})"
            for node, groups in sorted(shared.items())
        )
        return CheckResult(name, WARN, text, ev, "run one engine per device (one vLLM per NPU)")
    count_devices = len({n for nodes in holders.values() for n in nodes})
    seen = f"{len(holders)} process(es) hold {count_devices} device node(s)"
    if not holders:
        seen = "no process holds a device node"
    seen += privileged_note(facts.shm_held) if facts.shm_held is not None else ""
    if facts.processes is None:  # only the vendor tool's table: no open node, no state seen
        tool = f"by the device tool's table, {seen}"
        if not facts.live and "processes" in facts.not_recorded:
            why = f"{NOT_RECORDED['processes']} not in this recording"
            return CheckResult(name, SKIP, f"{why}; {tool}", ev)
        why = facts.errors.get("processes", "no process table")
        return CheckResult(name, UNKNOWN, f"could not run: {why}; {tool}", ev)
    blind = _unreadable(facts)
    if blind:
        summary = f"{seen} as far as this user can see; open files of {len(blind)} process(es) "
        summary += f"cannot be read (pid(s) {some_pids(sorted(blind))}): any may hold a device node"
        fix = "run the doctor as root (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH) to see every "
        fix += "process's open files"
        return CheckResult(name, UNKNOWN, summary, ev, fix)
    return CheckResult(name, OK, seen, ev)


def check_shared_memory(found: Findings, options: HygieneOptions) -> CheckResult:
    name = "shared_memory"
    facts, leaks = found.facts, found.leaks
    if facts.segments is None:
        return not_in_recording(facts, name, "segments")
    if leaks is None:
        if not facts.live and "processes" in facts.not_recorded:
            return not_in_recording(facts, name)
        return unknown(name, "no process table: cannot tell whether creators live")
    waits = [v.waiting_s for _, v in found.segments or () if v.waiting_s is not None]
    hidden = _hidden_note(facts) + waiting_note(waits, options.shm_min_age_s, "idle")
    if not leaks:
        return CheckResult(name, OK, f"{len(facts.segments)} segment(s), none leaked{hidden}")
    total = sum(s.size for s, _ in leaks)
    huge = sum(1 for s, _ in leaks if is_hugetlb(s))
    evidence = tuple(segment_evidence(s, facts, v.reason) for s, v in leaks)
    summary = f"{len(leaks)} leaked segment(s), {human_bytes(total)}"
    summary += (f", {huge} HugePages-backed" if huge else "") + hidden
    what = "removes exactly these shmids, re-checked at removal"
    fix = clean_fix(options, facts.live, what, "segments")
    return CheckResult(name, WARN, summary, evidence, fix)


def _hidden_note(facts: HostFacts) -> str:
    """What the process table does not show this reader (those are never called dead)."""
    if facts.processes_partial:
        return f"; {facts.processes_partial}: their segments are never called leaked"
    if facts.hidden_pids:
        return (
            f"; {len(facts.hidden_pids)} process(es) hidden from this user: "
            "segments they created or used are never called leaked"
        )
    return ""


def check_posix_shm(found: Findings, options: HygieneOptions) -> CheckResult:
    name, facts = "posix_shm", found.facts
    if facts.shm_held is None:
        return not_in_recording(facts, name)
    unread = [d for d, files in facts.shm_files.items() if files is None]
    if facts.shm_files and len(unread) == len(facts.shm_files):
        if not facts.live:
            return CheckResult(name, SKIP, f"{', '.join(unread)} not in this recording")
        return unknown(name, f"cannot list {', '.join(unread)}")
    judged = found.shm or ()
    leaked = [j for j in judged if j.leaked]
    unclaimed = [j for j in judged if j.unclaimed]
    blocked = [j for j in judged if j.blocked]
    scan = facts.shm_held
    evidence = tuple(shm_file_evidence(j, facts.now_epoch) for j in leaked + unclaimed + blocked)
    evidence += tuple(unreadable_evidence(scan, "these files"))
    where = ", ".join(facts.shm_files)
    pods = facts.containers.shm_dirs if facts.containers else ()
    if pods:
        where += f" and {len(pods)} container /dev/shm(s)"
    tail = f"; {len(unclaimed)} unnamed file(s) held by nobody" if unclaimed else ""
    tail += privileged_note(scan)
    waits = [j.waiting_s for j in judged if j.waiting_s is not None]
    tail += waiting_note(waits, options.shm_min_age_s)
    if blocked:
        pids = some_pids(scan.unreadable)
        tail += f"; {len(blocked)} file(s) cannot be judged (open files of pid(s) {pids} "
        tail += "unreadable: run as root)"
    if unread:
        tail += f"; cannot list {', '.join(unread)}"
    if leaked:
        used = sum(j.file.used_bytes for j in leaked)
        by = sorted({j.naming or "" for j in leaked})
        summary = f"{len(leaked)} leaked file(s) in {where}, {human_bytes(used)} used "
        summary += f"({', '.join(by)} naming){tail}"
        what = "removes exactly these files, re-checked one by one"
        fix = clean_fix(options, facts.live, what, "shm")
        return CheckResult(name, WARN, summary, evidence, fix)
    if blocked or unread:
        summary = f"{len(blocked)} file(s) in {where} may be leaked{tail}"
        fix = "run the doctor as root to see every process's open files"
        if scan.complete:
            fix = "cannot tell from these facts; never removed"
        return CheckResult(name, UNKNOWN, summary, evidence, fix)
    total = sum(len(f or ()) for f in facts.shm_files.values())
    total += sum(len(d.files or ()) for d in pods)
    return CheckResult(name, OK, f"{total} file(s) in {where}, none leaked{tail}", evidence)


def check_hugepages(found: Findings, options: HygieneOptions) -> CheckResult:
    name, facts = "hugepages", found.facts
    if facts.hugepage_pools is None:
        return not_in_recording(facts, name, "hugepages")
    pools = [p for p in facts.hugepage_pools if p.total > 0]
    if not pools:
        return CheckResult(name, OK, "no HugePages reserved on this host")
    limit = options.hugepages_threshold
    over = [p for p in pools if (p.used_fraction or 0.0) >= limit]
    if not over:
        return CheckResult(name, OK, f"{len(pools)} pool(s) below {limit:.0%}")
    evidence = tuple(
        {
            "kind": "hugepages",
            "size": p.size_label,
            "node": p.node,
            "total": p.total,
            "free": p.free,
            "reserved": p.reserved,
            "used_pct": round((p.used_fraction or 0.0) * 100, 1),
        }
        for p in over
    )
    text = ", ".join(
        f"{e['size']}{'' if e['node'] is None else ' node' + str(e['node'])} {e['used_pct']}%"
        for e in evidence
    )
    leaks = found.leaks
    if leaks and any((p.used_fraction or 0.0) >= 1.0 for p in over):
        summary = f"HugePages exhausted with {len(leaks)} leaked segment(s): {text}"
        what = "leaked segments pin HugePages until removed"
        fix = clean_fix(options, facts.live, what, "segments")
        return CheckResult(name, FAIL, summary, evidence, fix)
    fix = "check the pool size (vm.nr_hugepages) against the engines' needs"
    return CheckResult(name, WARN, f"HugePages above {limit:.0%}: {text}", evidence, fix)


CHECKS: dict[str, Callable[[Findings, HygieneOptions], CheckResult]] = {
    "orphan_engines": check_orphan_engines,
    "device_holders": check_device_holders,
    "unattributed_memory": lambda j, o: check_unattributed_memory(j.facts, o),
    "shared_memory": check_shared_memory,
    "posix_shm": check_posix_shm,
    "hugepages": check_hugepages,
    "preflight": lambda j, o: check_preflight(j.facts, o),
    "host_tuning": lambda j, o: check_host_tuning(j.facts, o),
    "container_init": check_container_init,
}


def run_checks(
    facts: HostFacts,
    options: HygieneOptions,
    only: tuple[str, ...] = (),
    found: Findings | None = None,
    chosen: Sequence[Container] | None = None,
) -> DoctorReport:
    """Every check (or the named ones) on `found` (`find(facts, options)` when the caller
    has not judged them yet); a check that breaks is UNKNOWN, not a crash. Every process
    and leftover of every check is named by its container (null on the host); with
    `chosen` (default: the containers `options.container` names, a UsageError when none),
    only what those run or left is reported."""
    found = found or find(facts, options)
    if chosen is None and options.container is not None:
        chosen = found.attribution.resolve(options.container)
    results = []
    for name in CHECK_NAMES:
        if only and name not in only:
            continue
        try:
            results.append(CHECKS[name](found, options))
        except Exception as exc:  # a bug in one check must not hide the others
            results.append(unknown(name, f"internal error: {type(exc).__name__}: {exc}"))
    return annotate_report(DoctorReport(tuple(results)), found.attribution, chosen)


__all__ = ["CHECK_NAMES", "CheckResult", "DoctorReport", "run_checks"]
