"""What a doctor's check result says besides its status: the evidence, what the check
could not see (a source not read or not recorded, processes it may not look into), and
the `accelhost clean` command its FIX names.

One evidence function per kind of thing (process, System V segment, POSIX shared-memory
file), so that the same fact has the same JSON key everywhere (and in `clean`'s actions).

The clean command is built in one place from the options in force: a fix that drops the
doctor's `--container` or `--shm-min-age` does something else than the doctor described
(it removes the whole host's leftovers, or none of the fresh ones it just listed). So
every fix repeats the scope and each option that changes what clean finds (the shm dirs
and age, the engine catalog, where containers and pods are looked up), and a replayed
recording says that the command is for the recorded host: a replay cannot clean.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Sequence
from typing import Any

from accelhost.formats import mib_bytes
from accelhost.hygiene.facts.host import NOT_RECORDED, HostFacts
from accelhost.hygiene.judge.rules import Orphan, ShmVerdict, is_hugetlb, segment_idle_s
from accelhost.hygiene.options import DEFAULT_SHM_DIRS, DEFAULT_SHM_MIN_AGE_S, HygieneOptions
from accelhost.hygiene.report import SKIP, UNKNOWN, CheckResult
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.procs import ProcessInfo
from accelhost.readers.shmfiles import HeldScan


def unknown(name: str, why: str) -> CheckResult:
    return CheckResult(name, UNKNOWN, f"could not run: {why}")


def not_in_recording(facts: HostFacts, name: str, source: str = "processes") -> CheckResult:
    """SKIP on a recording that lacks `source`; UNKNOWN where a live host could not read it."""
    if not facts.live and source in facts.not_recorded:
        return CheckResult(name, SKIP, f"{NOT_RECORDED[source]} not in this recording")
    return unknown(name, facts.errors.get(source, f"{NOT_RECORDED[source]} not read"))


def some_pids(pids: Sequence[int]) -> str:
    """The first five pids, and `...` when there are more."""
    return " ".join(map(str, pids[:5])) + (" ..." if len(pids) > 5 else "")


def unreadable_evidence(scan: HeldScan, what: str) -> list[dict[str, Any]]:
    """The processes a holder scan could not read, as evidence: which, and what it means
    for `what` (the files or device nodes it judges)."""
    if not scan.unreadable:
        return []
    why = "their open files and mappings cannot be read by this user: any of them may hold "
    why += f"{what}; run as root (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH)"
    return [{"kind": "unreadable_processes", "pids": list(scan.unreadable), "reason": why}]


def privileged_note(scan: HeldScan) -> str:
    """The assumption a verdict rests on when a stronger namespace hides some processes."""
    if not scan.privileged:
        return ""
    return (
        f"; pid(s) {some_pids(scan.privileged)} hidden even with CAP_SYS_PTRACE (capabilities "
        "beyond this reader's: a sandbox's init) assumed to hold none"
    )


def waiting_note(waits: list[float], min_age_s: float, state: str = "old") -> str:
    """Fresh leftovers are not "none": how many would count but for `--shm-min-age`, and
    when the first does (`state`: "old" for files, "idle" for segments)."""
    if not waits:
        return ""
    n, first = len(waits), math.ceil(min(waits))
    counts = "counts" if n == 1 else "the first counts"
    return f"; {n} candidate(s) not yet {min_age_s:g} s {state} ({counts} in {first} s)"


def device_memory_of_pid(facts: HostFacts, pid: int) -> int | None:
    rows = [row.memory_mib for dev in facts.devices for row in dev.processes if row.pid == pid]
    values = [mib for mib in rows if mib is not None]
    return sum(values) if values else None


def process_evidence(proc: ProcessInfo, facts: HostFacts, **extra: Any) -> dict[str, Any]:
    age = facts.process_age_s(proc)
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
        "device_memory_bytes": mib_bytes(device_memory_of_pid(facts, proc.pid)),
        **extra,
    }


def orphan_evidence(o: Orphan, facts: HostFacts, blind: bool) -> dict[str, Any]:
    """`blind`: its open files cannot be read (it may hold anything)."""
    return process_evidence(
        o.proc,
        facts,
        engine=o.engine,
        parent=None if o.parent is None else {"pid": o.parent.pid, "cmdline": o.parent.command},
        group_frontend_pid=o.group_frontend,
        reason=o.reason,
        **({"open_files_unreadable": True} if blind else {}),
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


def shm_file_evidence(j: ShmVerdict, now_epoch: float | None) -> dict[str, Any]:
    f, age = j.file, j.file.age_s(now_epoch)
    return {
        "kind": "shm_file",
        "path": f.path,
        "used_bytes": f.used_bytes,
        "size_bytes": f.size_bytes,
        "owner": f.owner,
        "uid": f.uid,
        "age_s": None if age is None else round(age),
        "naming": j.naming,
        "reason": j.reason,
    }


def clean_command(
    options: HygieneOptions, only: str | None = None, named: tuple[str, ...] = (), yes: bool = True
) -> str:
    """`accelhost clean --yes [NAMED] [--only KIND] [options in force]`, quoted for a shell.
    `named`: what the command names (`--shmid 7`); `only`: the one kind it cleans; `yes`
    False: the dry run that shows what would go."""
    words = ["accelhost", "clean", *(["--yes"] if yes else []), *named]
    if only is not None:
        words += ["--only", only]
    # the options in force that change what clean removes
    if options.container is not None:
        words += ["--container", options.container]
    if options.shm_min_age_s != DEFAULT_SHM_MIN_AGE_S:
        words += ["--shm-min-age", f"{options.shm_min_age_s:g}"]
    words += [w for d in options.shm_dirs if d not in DEFAULT_SHM_DIRS for w in ("--shm-dir", d)]
    words += options.catalog_words
    words += [w for s in options.container_sockets for w in ("--docker-socket", s)]
    words += [w for s in options.cri_sockets for w in ("--cri-socket", s)]
    if options.kubelet_root is not None:
        words += ["--kubelet-root", options.kubelet_root]
    return " ".join(shlex.quote(w) for w in words)


def clean_fix(options: HygieneOptions, live: bool, what: str, only: str | None = None) -> str:
    """A FIX line: the command, what it does, and where it must run."""
    text = f"{clean_command(options, only)} ({what})"
    if live:
        return text
    return f"on the recorded host: {text}; a --snapshot replay cannot be cleaned"
