"""The doctor's POSIX shared-memory check: files under /dev/shm (and `--shm-dir`s, and the
containers' own /dev/shm) left by processes that are gone, as the rule in
`accelhost.hygiene.judge.rules` judges them (`judge_shm_file`); and the helpers the other checks
share to say what they could not see.
"""

from __future__ import annotations

import math
from typing import Any

from accelhost.hygiene.doctor.evidence import shm_file_evidence, unknown
from accelhost.hygiene.doctor.fixes import clean_fix
from accelhost.hygiene.facts.host import NOT_RECORDED, HostFacts
from accelhost.hygiene.judge.findings import Findings
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import OK, SKIP, UNKNOWN, WARN, CheckResult
from accelhost.hygiene.text import human_bytes
from accelhost.readers.shmfiles import HeldScan

NAME = "posix_shm"


def unreadable_evidence(scan: HeldScan, what: str) -> list[dict[str, Any]]:
    """The processes a holder scan could not read, as evidence: which, and what it means
    for `what` (the files or device nodes it judges)."""
    if not scan.unreadable:
        return []
    return [
        {
            "kind": "unreadable_processes",
            "pids": list(scan.unreadable),
            "reason": f"their open files and mappings cannot be read by this user: any of "
            f"them may hold {what}; run as root (CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH)",
        }
    ]


def privileged_note(scan: HeldScan) -> str:
    """The assumption a verdict rests on when a stronger namespace hides some processes."""
    if not scan.privileged:
        return ""
    pids = " ".join(map(str, scan.privileged[:5])) + (" ..." if len(scan.privileged) > 5 else "")
    return (
        f"; pid(s) {pids} hidden even with CAP_SYS_PTRACE (capabilities beyond this "
        "reader's: a sandbox's init) assumed to hold none"
    )


def not_in_recording(facts: HostFacts, name: str, source: str = "processes") -> CheckResult:
    """SKIP on a recording that lacks `source`; UNKNOWN where a live host could not read it."""
    if not facts.live and source in facts.not_recorded:
        return CheckResult(name, SKIP, f"{NOT_RECORDED[source]} not in this recording")
    return unknown(name, facts.errors.get(source, f"{NOT_RECORDED[source]} not read"))


def waiting_note(waits: list[float], min_age_s: float, state: str = "old") -> str:
    """Fresh leftovers are not "none": how many would count but for `--shm-min-age`, and
    when the first does (`state`: "old" for files, "idle" for segments)."""
    if not waits:
        return ""
    n, first = len(waits), math.ceil(min(waits))
    counts = "counts" if n == 1 else "the first counts"
    return f"; {n} candidate(s) not yet {min_age_s:g} s {state} ({counts} in {first} s)"


def check_posix_shm(found: Findings, options: HygieneOptions) -> CheckResult:
    facts = found.facts
    if facts.shm_held is None:
        return not_in_recording(facts, NAME)
    unread = [d for d, files in facts.shm_files.items() if files is None]
    if facts.shm_files and len(unread) == len(facts.shm_files):
        if not facts.live:
            return CheckResult(NAME, SKIP, f"{', '.join(unread)} not in this recording")
        return unknown(NAME, f"cannot list {', '.join(unread)}")
    judged = found.shm or ()
    leaked = [j for j in judged if j.leaked]
    unclaimed = [j for j in judged if j.unclaimed]
    blocked = [j for j in judged if j.blocked]
    scan = facts.shm_held
    evidence = tuple(
        shm_file_evidence(j.file, facts.now_epoch, j.naming, j.reason)
        for j in leaked + unclaimed + blocked
    ) + tuple(unreadable_evidence(scan, "these files"))
    where = ", ".join(facts.shm_files)
    pods = facts.containers.shm_dirs if facts.containers else ()
    if pods:
        where += f" and {len(pods)} container /dev/shm(s)"
    tail = f"; {len(unclaimed)} unnamed file(s) held by nobody" if unclaimed else ""
    tail += privileged_note(scan)
    waits = [j.waiting_s for j in judged if j.waiting_s is not None]
    tail += waiting_note(waits, options.shm_min_age_s)
    if blocked:
        tail += f"; {len(blocked)} file(s) cannot be judged ({_blocked_why(scan)})"
    if unread:
        tail += f"; cannot list {', '.join(unread)}"
    if leaked:
        used = sum(j.file.used_bytes for j in leaked)
        by = sorted({j.naming or "" for j in leaked})
        return CheckResult(
            NAME,
            WARN,
            f"{len(leaked)} leaked file(s) in {where}, {human_bytes(used)} used "
            f"({', '.join(by)} naming){tail}",
            evidence,
            clean_fix(
                options, facts.live, "removes exactly these files, re-checked one by one", "shm"
            ),
        )
    if blocked or unread:
        return CheckResult(
            NAME,
            UNKNOWN,
            f"{len(blocked)} file(s) in {where} may be leaked{tail}",
            evidence,
            "run the doctor as root to see every process's open files"
            if not scan.complete
            else "cannot tell from these facts; never removed",
        )
    total = sum(len(f or ()) for f in facts.shm_files.values())
    total += sum(len(d.files or ()) for d in pods)
    return CheckResult(NAME, OK, f"{total} file(s) in {where}, none leaked{tail}", evidence)


def _blocked_why(scan: HeldScan) -> str:
    """Why files could not be judged: the processes whose open files could not be read."""
    pids = " ".join(str(p) for p in scan.unreadable[:5])
    more = " ..." if len(scan.unreadable) > 5 else ""
    return f"open files of pid(s) {pids}{more} unreadable: run as root"
