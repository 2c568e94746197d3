"""The host-tuning check: settings that fight a CPU plan, fragment device memory, or take
an engine's shared memory away.

Hints only (WARN at most): none of them stops an engine from serving.
"""

from __future__ import annotations

from typing import Any

from accelhost.hygiene.doctor.evidence import process_evidence
from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import OK, WARN, CheckResult

# logind leaves system users alone (uid up to SYS_UID_MAX, 999 on Debian and Fedora)
SYS_UID_MAX = 999
NO_EXPANDABLE = (
    "no expandable_segments:True in PYTORCH_NPU_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF: device "
    "memory fragments across restarts"
)
REMOVE_IPC_FIX = (
    "RemoveIPC=no under [Login] in /etc/systemd/logind.conf.d/accelhost.conf (then "
    "systemctl restart systemd-logind), or run the engine as a system user or with "
    "loginctl enable-linger USER"
)


def _hint(item: str, detail: str, **fields: Any) -> dict[str, Any]:
    return {"kind": "tuning", "item": item, **fields, "detail": detail}


def _remove_ipc(facts: HostFacts) -> dict[str, Any] | None:
    """systemd-logind's `RemoveIPC=yes` (the default) removes a non-system user's shared
    memory when their last session ends, under a running engine (vLLM #54259)."""
    cf = facts.containers
    if cf is None or not cf.remove_ipc:
        return None
    procs = (facts.processes or {}).values()
    if not any(p.comm == "systemd-logind" and not p.is_zombie for p in procs):
        return None
    users = {pid: uid for pid, uid in cf.engine_uids.items() if uid > SYS_UID_MAX}
    if not users:
        return None
    pid = min(users)
    detail = (
        f"systemd-logind RemoveIPC=yes ({cf.remove_ipc_source}): when uid {users[pid]}'s "
        f"last session ends, logind removes its shared memory under the running engine "
        f"(pid {pid}; vLLM #54259)"
    )
    return _hint(
        "logind_remove_ipc",
        detail,
        source=cf.remove_ipc_source,
        engine_pids=sorted(users),
        uids=sorted(set(users.values())),
    )


def check_host_tuning(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "host_tuning"
    t = facts.tuning
    evidence: list[dict[str, Any]] = []
    pinned = [i.irq for i in t.device_irqs if t.online_cpus and i.affinity != t.online_cpus]
    if t.irqbalance_pids and pinned:
        detail = "irqbalance runs while device IRQs are pinned: it will move them"
        evidence.append(
            _hint("irqbalance", detail, pids=list(t.irqbalance_pids), pinned_irqs=pinned)
        )
    if t.thp_enabled == t.thp_defrag == "always":
        detail = "defrag=always compacts memory on page faults: latency stalls"
        evidence.append(_hint("transparent_hugepage", detail, enabled="always", defrag="always"))
    if t.proc_irq_readonly:
        detail = "/proc/irq is read-only here: device IRQs cannot be pinned from this container"
        evidence.append(_hint("proc_irq", detail))
    for var, value in sorted(t.affinity_env.items()):
        detail = f"{var} binds OpenMP threads and fights the CPU plan"
        evidence.append(_hint(var, detail, value=value))
    n, per = len(facts.devices), options.cpus_per_device
    if t.allowed_cpus is not None and n and t.allowed_cpus < n * per:
        detail = f"{t.allowed_cpus} CPUs for {n} devices (under {per} per device)"
        evidence.append(_hint("cpuset", detail, allowed_cpus=t.allowed_cpus, devices=n))
    procs = facts.processes or {}
    for pid, env in sorted(facts.engine_env.items()):
        if any("expandable_segments:True" in v for v in env.values()) or pid not in procs:
            continue
        evidence.append(
            process_evidence(procs[pid], facts, item="alloc_conf", detail=NO_EXPANDABLE)
        )
    fixes = ["see each item's detail; `accelhost plan` / `bind` pins CPUs and IRQs"]
    fixes = fixes if evidence else []
    if (remove_ipc := _remove_ipc(facts)) is not None:
        evidence.append(remove_ipc)
        fixes.append(REMOVE_IPC_FIX)
    if not evidence:
        return CheckResult(name, OK, "nothing to tune")
    items = ", ".join(dict.fromkeys(str(e["item"]) for e in evidence))
    return CheckResult(name, WARN, f"host tuning: {items}", tuple(evidence), "; ".join(fixes))
