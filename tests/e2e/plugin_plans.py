"""Plan files and CPUs for the vLLM plugin's servers (tests/e2e/test_plugin_e2e.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def cpus() -> tuple[int, int]:
    """(the CPU vLLM's own OpenMP binding gets, the CPU of the plan's device 0).

    The first and the last CPU this process may use (0 and 1 on a 2-CPU machine): the
    plugin is the only thing that can put every worker thread on the plan's CPU.
    """
    allowed = sorted(os.sched_getaffinity(0))
    return allowed[0], allowed[-1]


def absent_cpu() -> int:
    """A CPU id this host does not have (one past the last possible CPU)."""
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    return max(int(part.split("-")[-1]) for part in text.split(",")) + 1


def plan_path(workdir: Path, name: str) -> Path:
    return workdir / f"{name}.plan.json"


def plugin_env(workdir: Path, name: str, device0_cpus: list[int]) -> dict[str, str]:
    """ACCELHOST_PLAN naming a plan file written now; vLLM's own threads on the first CPU."""
    path = plan_path(workdir, name)
    path.write_text(json.dumps({"devices": {"0": {"main": device0_cpus}}}))
    return {"ACCELHOST_PLAN": str(path), "VLLM_CPU_OMP_THREADS_BIND": str(cpus()[0])}
