"""The doctor's POSIX shared-memory check: files under /dev/shm (and `--shm-dir`s) left by
processes that are gone.

A file counts as leaked when no live process holds it open or maps it, it has not changed
for `--shm-min-age`, and its name matches an engine's naming in the catalog (or a
`--shm-name` glob). Files held by nobody that match no naming are listed but never
removed: /dev/shm is shared by every program on the host, and we only clean what we can
name. `judge_shm_file` is the rule for one file (held by no live process, unchanged for
`--shm-min-age`); `judge_shm_files` applies it for the doctor and the cleaner alike,
`leaked_posix_shm` for a library caller. The files and who holds them (by path or by
inode: a live vLLM's semaphore is mapped only under the temporary name its creator made
it with) are read by `accelhost.readers.shmfiles`. A fact the rule needs and does not have
(some process's open files) makes the file "cannot tell" (UNKNOWN, never removed), on a
live host and on its recording alike: the same facts, the same verdict.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelhost.host.base import Host
from accelhost.hygiene.container_shm import ShmListing, container_listings
from accelhost.hygiene.evidence import shm_file_evidence, unknown
from accelhost.hygiene.facts import NOT_RECORDED, HostFacts
from accelhost.hygiene.options import DEFAULT_SHM_DIRS, HygieneOptions
from accelhost.hygiene.report import OK, SKIP, UNKNOWN, WARN, CheckResult
from accelhost.hygiene.text import human_bytes
from accelhost.readers.shmfiles import HeldScan, ShmFile, list_shm_files, scan_held

NAME = "posix_shm"


@dataclass(frozen=True)
class ShmVerdict:
    file: ShmFile
    leaked: bool
    reason: str
    naming: str | None  # which engine's naming the name matches (None: no known naming)
    blocked: bool = False  # could not tell: some live process's open files were unreadable


def judge_shm_file(
    f: ShmFile,
    scan: HeldScan,
    now_epoch: float | None,
    min_age_s: float,
    naming: str | None,
) -> ShmVerdict:
    """The POSIX leak rule: held by no live process and unchanged for `min_age_s`. Where a
    fact the rule needs is missing (some process's open files) the file is `blocked`: not
    leaked, not kept as fine, "cannot tell", whether the host is live or a recording."""
    if scan.holds(f):
        return ShmVerdict(f, False, "held open or mapped by a live process", naming)
    age = f.age_s(now_epoch)
    if age is None:
        return ShmVerdict(f, False, "age unknown (no clock)", naming)
    if age < min_age_s:
        return ShmVerdict(f, False, f"unchanged {age:.0f} s, under {min_age_s:g} s", naming)
    if not scan.complete:
        shown = ", ".join(str(p) for p in scan.unreadable[:3])
        more = f" and {len(scan.unreadable) - 3} more" if len(scan.unreadable) > 3 else ""
        return ShmVerdict(
            f,
            False,
            f"cannot tell: open files of pid(s) {shown}{more} unreadable, any may hold it",
            naming,
            True,
        )
    return ShmVerdict(f, True, f"held by no process, unchanged {age:.0f} s", naming)


def match_naming(name: str, namings: Sequence[tuple[str, str]]) -> str | None:
    """The first (label, glob) whose glob matches the file name."""
    return next((label for label, glob in namings if fnmatch.fnmatchcase(name, glob)), None)


def leaked_posix_shm(
    dirs: Sequence[str] = DEFAULT_SHM_DIRS,
    min_age_s: float = 60.0,
    host: Host | None = None,
    namings: Sequence[tuple[str, str]] = (),
    now_epoch: float | None = None,
) -> list[ShmVerdict]:
    """Files under `dirs` no live process holds, unchanged for `min_age_s` (live by default)."""
    import time

    if host is None:
        from accelhost.host.live import live_host

        host = live_host()
    now = time.time() if now_epoch is None and host.is_live else now_epoch
    scan = scan_held(host)
    out = []
    for files in list_shm_files(host, dirs).values():
        for f in files or []:
            verdict = judge_shm_file(f, scan, now, min_age_s, match_naming(f.name, namings))
            if verdict.leaked:
                out.append(verdict)
    return out


@dataclass(frozen=True)
class ShmJudgement:
    file: ShmFile
    naming: str | None
    leaked: bool  # held by nobody, old enough, and named by the catalog: clean removes it
    unclaimed: bool  # held by nobody, old enough, but no naming matches: reported only
    blocked: bool  # could not tell: some process's open files were unreadable
    reason: str


def judgement(f: ShmFile, naming: str | None, v: ShmVerdict, note: str = "") -> ShmJudgement:
    """A verdict of the leak rule as the doctor and the cleaner use it: only a file an
    engine's naming matches is removed."""
    reason = v.reason + note
    if v.leaked and naming is None:
        reason += "; matches no engine naming: not removed (see --shm-name)"
    return ShmJudgement(
        f, naming, v.leaked and naming is not None, v.leaked and not naming, v.blocked, reason
    )


def shm_known(facts: HostFacts) -> bool:
    """The process table and at least one shm dir were read: a count of 0 means none."""
    listed = any(files is not None for files in facts.shm_files.values())
    return facts.shm_held is not None and listed


def judge_shm_files(facts: HostFacts, options: HygieneOptions) -> list[ShmJudgement]:
    """Every file in the shm dirs, judged; empty when the process table was not read."""
    held = facts.shm_held
    if held is None:
        return []
    naming_of = options.catalog.shm_naming
    out = []
    # the host's dirs, then each container's own /dev/shm (accelhost.hygiene.container_shm)
    listings = [
        ShmListing(tuple((f, f) for f in files or ()), held) for files in facts.shm_files.values()
    ] + container_listings(facts)
    for listing in listings:
        for f, seen in sorted(listing.files, key=lambda pair: pair[0].path):
            naming = naming_of(f.name)
            v = judge_shm_file(seen, listing.held, facts.now_epoch, options.shm_min_age_s, naming)
            out.append(judgement(f, naming, v, listing.note))
    return out


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


def check_posix_shm(
    facts: HostFacts, options: HygieneOptions, judged: list[ShmJudgement] | None = None
) -> CheckResult:
    """`judged`: `judge_shm_files(facts, options)` when the caller has it already (a watch
    round uses the judgement for its metrics too: 3,000 files are judged once)."""
    if facts.shm_held is None:
        return not_in_recording(facts, NAME)
    unread = [d for d, files in facts.shm_files.items() if files is None]
    if facts.shm_files and len(unread) == len(facts.shm_files):
        if not facts.live:
            return CheckResult(NAME, SKIP, f"{', '.join(unread)} not in this recording")
        return unknown(NAME, f"cannot list {', '.join(unread)}")
    judged = judge_shm_files(facts, options) if judged is None else judged
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
            "accelhost clean --yes (removes exactly these files, re-checked one by one)",
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
