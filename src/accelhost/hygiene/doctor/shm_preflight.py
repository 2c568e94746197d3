"""Two things that stop an engine before it serves, said before they happen.

- /dev/shm too small: vLLM refuses to start with "Insufficient space in /dev/shm ..."
  (vLLM #48879); the preflight says the same words first (`shm_need_mib`).
- systemd-logind's `RemoveIPC=yes` (the default) removes a non-system user's shared
  memory when their last session ends, under a running engine (vLLM #54259).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from accelhost.hygiene.doctor.fixes import clean_command
from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import FAIL, OK, SKIP, WARN, CheckResult

MIB = 1024 * 1024
# logind leaves system users alone (uid up to SYS_UID_MAX, 999 on Debian and Fedora)
SYS_UID_MAX = 999


def shm_fix(options: HygieneOptions) -> str:
    """Make room in /dev/shm: remove what leaked (the doctor's own scope), or grow it."""
    return (
        f"remove leaked files ({clean_command(options, 'shm')}) or increase /dev/shm "
        "(--shm-size, --ipc=host, or a larger emptyDir sizeLimit)"
    )


REMOVE_IPC_FIX = (
    "RemoveIPC=no under [Login] in /etc/systemd/logind.conf.d/accelhost.conf (then "
    "systemctl restart systemd-logind), or run the engine as a system user or with "
    "loginctl enable-linger USER"
)


def shm_space_evidence(facts: HostFacts, options: HygieneOptions) -> dict[str, Any] | None:
    """vLLM's words when /dev/shm has less free space than the engine needs; else None."""
    cf = facts.containers
    space = cf.shm_space if cf else None
    if space is None:
        return None
    free_mib = space.free_bytes // MIB
    if free_mib >= options.shm_need_mib:
        return None
    return {
        "kind": "shm_space",
        "path": "/dev/shm",
        "required_mib": options.shm_need_mib,
        "free_mib": free_mib,
        "total_mib": space.total_bytes // MIB,
        "message": f"Insufficient space in /dev/shm for the engine's shared memory: "
        f"{options.shm_need_mib} MiB required, {free_mib} MiB free. Increase /dev/shm "
        "(e.g. --shm-size or --ipc=host).",
    }


def with_shm_space(result: CheckResult, facts: HostFacts, options: HygieneOptions) -> CheckResult:
    """The device preflight, plus /dev/shm's space when the preflight was asked for."""
    if result.status == SKIP:
        return result
    found = shm_space_evidence(facts, options)
    if found is None:
        return result
    summary = found["message"] if result.status == OK else f"{result.summary}; /dev/shm too small"
    fix = shm_fix(options) if result.status == OK else f"{result.fix}; {shm_fix(options)}"
    evidence = (*result.evidence, found)
    return replace(result, status=FAIL, summary=summary, evidence=evidence, fix=fix)


def remove_ipc_evidence(facts: HostFacts) -> dict[str, Any] | None:
    cf = facts.containers
    procs = facts.processes or {}
    if cf is None or not cf.remove_ipc:
        return None
    if not any(p.comm == "systemd-logind" and not p.is_zombie for p in procs.values()):
        return None
    users = {pid: uid for pid, uid in cf.engine_uids.items() if uid > SYS_UID_MAX}
    if not users:
        return None
    pid = min(users)
    return {
        "kind": "tuning",
        "item": "logind_remove_ipc",
        "source": cf.remove_ipc_source,
        "engine_pids": sorted(users),
        "uids": sorted(set(users.values())),
        "detail": f"systemd-logind RemoveIPC=yes ({cf.remove_ipc_source}): when uid "
        f"{users[pid]}'s last session ends, logind removes its shared memory under the "
        f"running engine (pid {pid}; vLLM #54259)",
    }


def with_remove_ipc(result: CheckResult, facts: HostFacts) -> CheckResult:
    found = remove_ipc_evidence(facts)
    if found is None or result.status not in (OK, WARN):
        return result
    evidence = (*result.evidence, found)
    items = ", ".join(dict.fromkeys(str(e.get("item")) for e in evidence))
    fix = REMOVE_IPC_FIX if result.status == OK else f"{result.fix}; {REMOVE_IPC_FIX}"
    return replace(result, status=WARN, summary=f"host tuning: {items}", evidence=evidence, fix=fix)
