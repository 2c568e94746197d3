"""The host-tuning check: settings that fight a CPU plan or fragment device memory.

Hints only (WARN at most): none of them stops an engine from serving.
"""

from __future__ import annotations

from typing import Any

from accelhost.hygiene.evidence import process_evidence
from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import OK, WARN, CheckResult


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
