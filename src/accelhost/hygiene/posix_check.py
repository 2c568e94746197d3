"""The doctor's POSIX shared-memory check: files under /dev/shm (and `--shm-dir`s) left by
processes that are gone.

A file counts as leaked when no live process holds it open or maps it, it has not changed
for `--shm-min-age`, and its name matches an engine's naming in the catalog (or a
`--shm-name` glob). Files held by nobody that match no naming are listed but never
removed: /dev/shm is shared by every program on the host, and we only clean what we can
name. `judge_shm_file` is the rule for one file (held by no live process, no sibling of a
held one, unchanged for `--shm-min-age`); `judge_shm_files` applies it for the doctor and
the cleaner alike, `leaked_posix_shm` for a library caller. The files and who holds them
are read by `accelhost.readers.shmfiles`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass

from accelhost.host.base import Host
from accelhost.hygiene.evidence import shm_file_evidence, unknown
from accelhost.hygiene.facts import HostFacts
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


# vLLM makes its message queues (psm_*) and their semaphores (sem.mp-*) at the same
# moment; while it serves, its resource tracker keeps such a semaphore's name, which no
# process holds open or mapped. A file born this close to one a live process holds is
# that live process's sibling, not a leak (a false "sibling" only ever keeps a file).
SIBLING_WINDOW_S = 2.0


def held_births(files: Sequence[ShmFile], scan: HeldScan) -> list[float]:
    """Birth times of the files some live process holds (siblings are judged by them)."""
    return [f.birth for f in files if f.birth is not None and scan.holds(f)]


def judge_shm_file(
    f: ShmFile,
    scan: HeldScan,
    now_epoch: float | None,
    min_age_s: float,
    naming: str | None,
    sibling_births: Sequence[float] = (),
) -> ShmVerdict:
    """The POSIX leak rule: held by no live process, no sibling of a held file (born within
    SIBLING_WINDOW_S of one), and unchanged for `min_age_s`."""
    if scan.holds(f):
        return ShmVerdict(f, False, "held open or mapped by a live process", naming)
    if f.birth is not None and any(abs(f.birth - b) <= SIBLING_WINDOW_S for b in sibling_births):
        return ShmVerdict(f, False, "born with a file a live process holds: that process's", naming)
    if not scan.complete:
        shown = ", ".join(str(p) for p in scan.unreadable[:3])
        return ShmVerdict(f, False, f"open files of pid(s) {shown} unreadable", naming, True)
    age = f.age_s(now_epoch)
    if age is None:
        return ShmVerdict(f, False, "age unknown (no clock)", naming)
    if age < min_age_s:
        return ShmVerdict(f, False, f"unchanged {age:.0f} s, under {min_age_s:g} s", naming)
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
        siblings = held_births(files or [], scan)
        for f in files or []:
            verdict = judge_shm_file(
                f, scan, now, min_age_s, match_naming(f.name, namings), siblings
            )
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
    for files in facts.shm_files.values():
        siblings = held_births(files or (), held)
        for f in sorted(files or (), key=lambda f: f.path):
            naming = match_naming(f.name, namings)
            v = judge_shm_file(f, held, facts.now_epoch, options.shm_min_age_s, naming, siblings)
            blocked = v.blocked
            reason = v.reason
            if v.leaked and naming is None:
                reason += "; matches no engine naming: not removed (see --shm-name)"
            out.append(
                ShmJudgement(
                    f,
                    naming,
                    v.leaked and naming is not None,
                    v.leaked and not naming,
                    blocked,
                    reason,
                )
            )
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
    return CheckResult(NAME, OK, f"{total} file(s) in {where}, none leaked{tail}", evidence)
