"""Files in the containers' own /dev/shm, judged like the host's (the same leak rule).

A pod's /dev/shm (or one shared with `--ipc=container:...`) is not the host's: the host's
listing never shows it, and its holders name its files by their own path (`/dev/shm/x`),
not the host's (`/proc/<pid>/root/dev/shm/x`). So each file is judged under the name its
namespace's processes use, against what they hold (and against every process's mapped
inodes, whatever its namespace); a file of the live incarnation is held or born with a
held one, and stays. `judge_shm_files` (posix_check) adds these judgements to the host's,
so the doctor reports them and the cleaner removes them through the host's path, with the
same re-checks at removal (inode, mtime, held by nobody). This module imports nothing of
posix_check (which imports it): it returns verdicts, posix_check makes them judgements.
"""

from __future__ import annotations

from dataclasses import replace

from accelhost.hygiene.facts import HostFacts
from accelhost.hygiene.options import HygieneOptions
from accelhost.posixshm import (
    HeldScan,
    ShmFile,
    ShmVerdict,
    held_births,
    judge_shm_file,
    match_naming,
)

NOTE = "; in a container's own /dev/shm"


def judge_container_shm(
    facts: HostFacts, options: HygieneOptions
) -> list[tuple[ShmFile, str | None, ShmVerdict]]:
    """Every file of every container /dev/shm with its naming and verdict (under the host's
    path); empty without containers."""
    cf = getattr(facts, "containers", None)
    everyone = facts.shm_held
    if cf is None or everyone is None:
        return []
    namings = options.catalog.shm_namings()
    out: list[tuple[ShmFile, str | None, ShmVerdict]] = []
    for d in cf.shm_dirs:
        if d.files is None or d.held is None:
            continue
        held = HeldScan(
            paths=d.held.paths | {p for p in everyone.paths if p.startswith(d.path + "/")},
            inodes=d.held.inodes | everyone.inodes,
            unreadable=everyone.unreadable,
            privileged=everyone.privileged,
        )
        inside = [replace(f, path=f"/dev/shm/{f.name}") for f in d.files]
        siblings = held_births(inside, held)
        for f, seen_inside in sorted(zip(d.files, inside, strict=True), key=lambda x: x[0].path):
            naming = match_naming(f.name, namings)
            v = judge_shm_file(
                seen_inside, held, facts.now_epoch, options.shm_min_age_s, naming, siblings
            )
            out.append((f, naming, v))
    return out
