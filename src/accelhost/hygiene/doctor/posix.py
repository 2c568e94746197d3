"""The doctor's POSIX shared-memory check: files under /dev/shm (and `--shm-dir`s, and the
containers' own /dev/shm) left by processes that are gone, as the rule in
`accelhost.hygiene.judge.rules` judges them (`judge_shm_file`).
"""

from __future__ import annotations

from accelhost.hygiene.doctor.evidence import (
    not_in_recording,
    privileged_note,
    shm_file_evidence,
    some_pids,
    unknown,
    unreadable_evidence,
    waiting_note,
)
from accelhost.hygiene.doctor.fixes import clean_fix
from accelhost.hygiene.judge.findings import Findings
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import OK, SKIP, UNKNOWN, WARN, CheckResult
from accelhost.hygiene.text import human_bytes

NAME = "posix_shm"


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
        # the processes whose open files could not be read
        pids = some_pids(scan.unreadable)
        tail += f"; {len(blocked)} file(s) cannot be judged (open files of pid(s) {pids} "
        tail += "unreadable: run as root)"
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
