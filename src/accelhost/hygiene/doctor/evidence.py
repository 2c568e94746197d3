"""Evidence objects shared by the doctor's checks and the cleaner's plan.

One function per kind of thing, so that the same fact has the same JSON key everywhere:
`pid`, `cmdline`, `parent` for processes; `shmid`, `key`, `bytes`, `creator_pid`,
`last_pid` for System V segments; `path`, `used_bytes`, `size_bytes`, `owner`, `uid`,
`age_s`, `naming` for POSIX shared-memory files.
"""

from __future__ import annotations

from typing import Any

from accelhost.formats import mib_bytes
from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.judge.rules import Orphan, is_hugetlb, segment_idle_s
from accelhost.hygiene.report import UNKNOWN, CheckResult
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.procs import ProcessInfo
from accelhost.readers.shmfiles import ShmFile


def unknown(name: str, why: str) -> CheckResult:
    return CheckResult(name, UNKNOWN, f"could not run: {why}")


def device_memory_of_pid(facts: HostFacts, pid: int) -> int | None:
    values = [
        row.memory_mib
        for dev in facts.devices
        for row in dev.processes
        if row.pid == pid and row.memory_mib is not None
    ]
    return sum(values) if values else None


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
        "device_memory_bytes": mib_bytes(mem),
        **extra,
    }


def orphan_evidence(o: Orphan, facts: HostFacts) -> dict[str, Any]:
    return process_evidence(
        o.proc,
        facts,
        engine=o.engine,
        parent=None if o.parent is None else {"pid": o.parent.pid, "cmdline": o.parent.command},
        group_frontend_pid=o.group_frontend,
        reason=o.reason,
    )


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


def shm_file_evidence(
    f: ShmFile, now_epoch: float | None, naming: str | None, reason: str
) -> dict[str, Any]:
    age = f.age_s(now_epoch)
    return {
        "kind": "shm_file",
        "path": f.path,
        "used_bytes": f.used_bytes,
        "size_bytes": f.size_bytes,
        "owner": f.owner,
        "uid": f.uid,
        "age_s": None if age is None else round(age),
        "naming": naming,
        "reason": reason,
    }
