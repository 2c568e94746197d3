"""The doctor's POSIX shared-memory check: files under /dev/shm (and `--shm-dir`s) left by
processes that are gone.

A file counts as leaked when no live process holds it open or maps it, it has not changed
for `--shm-min-age`, and its name matches an engine's naming in the catalog (or a
`--shm-name` glob). Files held by nobody that match no naming are listed but never
removed: /dev/shm is shared by every program on the host, and we only clean what we can
name. `plan_shm` is the one place that decides, for the doctor and the cleaner alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelhost.hygiene.container_shm import ShmListing, container_listings
from accelhost.hygiene.evidence import shm_file_evidence, unknown
from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import OK, SKIP, UNKNOWN, WARN, CheckResult
from accelhost.hygiene.text import human_bytes
from accelhost.posixshm import ShmFile, ShmVerdict, held_births, judge_shm_file, match_naming

NAME = "posix_shm"


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
    namings = options.catalog.shm_namings()
    out = []
    # the host's dirs, then each container's own /dev/shm (accelhost.hygiene.container_shm)
    listings = [
        ShmListing(tuple((f, f) for f in files or ()), held) for files in facts.shm_files.values()
    ] + container_listings(facts)
    for listing in listings:
        siblings = held_births([seen for _, seen in listing.files], listing.held)
        for f, seen in sorted(listing.files, key=lambda pair: pair[0].path):
            naming = match_naming(f.name, namings)
            v = judge_shm_file(
                seen, listing.held, facts.now_epoch, options.shm_min_age_s, naming, siblings
            )
            out.append(judgement(f, naming, v, listing.note))
    return out


def check_posix_shm(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    if facts.shm_held is None:
        return unknown(NAME, facts.errors.get("processes", "no process table"))
    unread = [d for d, files in facts.shm_files.items() if files is None]
    if facts.shm_files and len(unread) == len(facts.shm_files):
        if not facts.live:
            return CheckResult(NAME, SKIP, f"{', '.join(unread)} not in this recording")
        return unknown(NAME, f"cannot list {', '.join(unread)}")
    judged = judge_shm_files(facts, options)
    leaked = [j for j in judged if j.leaked]
    unclaimed = [j for j in judged if j.unclaimed]
    blocked = [j for j in judged if j.blocked]
    evidence = tuple(
        shm_file_evidence(j.file, facts.now_epoch, j.naming, j.reason)
        for j in leaked + unclaimed + blocked
    )
    where = ", ".join(facts.shm_files)
    pods = facts.containers.shm_dirs if facts.containers else ()
    if pods:
        where += f" and {len(pods)} container /dev/shm(s)"
    tail = f"; {len(unclaimed)} unnamed file(s) held by nobody" if unclaimed else ""
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
        pids = " ".join(str(p) for p in facts.shm_held.unreadable[:5])
        why = f"open files of pid(s) {pids} unreadable (run as root)" if blocked else tail[2:]
        return CheckResult(
            NAME,
            UNKNOWN,
            f"{len(blocked)} file(s) in {where} may be leaked: {why}",
            evidence,
            "run the doctor as root to see every process's open files",
        )
    total = sum(len(f or ()) for f in facts.shm_files.values())
    total += sum(len(d.files or ()) for d in pods)
    return CheckResult(NAME, OK, f"{total} file(s) in {where}, none leaked{tail}", evidence)
