"""Files in the containers' own /dev/shm, judged like the host's (the same leak rule).

A pod's /dev/shm (or one shared with `--ipc=container:...`) is not the host's: the host's
listing never shows it, and its holders name its files by their own path (`/dev/shm/x`),
not the host's (`/proc/<pid>/root/dev/shm/x`). So each file is judged under the name its
namespace's processes use, against what they hold (and against every process's mapped
inodes, whatever its namespace); a file of the live incarnation is held or born with a
held one, and stays. `judge_shm_files` (posix_check) judges these listings with the host's,
so the doctor reports them and the cleaner removes them through the host's path, with the
same re-checks at removal (inode, mtime, held by nobody). This module only lists (the
judging stays in posix_check, which imports it).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from accelhost.hygiene.facts import HostFacts
from accelhost.readers.shmfiles import HeldScan, ShmFile

NOTE = "; in a container's own /dev/shm"


@dataclass(frozen=True)
class ShmListing:
    """Files to judge together: each as the host reaches it and as its holders name it,
    and what those holders hold."""

    files: tuple[tuple[ShmFile, ShmFile], ...]  # (host's path, holders' path)
    held: HeldScan
    note: str = ""


def container_listings(facts: HostFacts) -> list[ShmListing]:
    """One listing per container /dev/shm (empty without containers): its files under
    the name its processes use, held = what they hold plus every process's mapped inodes
    and whatever names the file by the host's path."""
    cf = facts.containers
    everyone = facts.shm_held
    if cf is None or everyone is None:
        return []
    out = []
    for d in cf.shm_dirs:
        if d.files is None or d.held is None:
            continue
        held = HeldScan(
            paths=d.held.paths | {p for p in everyone.paths if p.startswith(d.path + "/")},
            inodes=d.held.inodes | everyone.inodes,
            unreadable=everyone.unreadable,
            privileged=everyone.privileged,
        )
        pairs = tuple((f, replace(f, path=f"/dev/shm/{f.name}")) for f in d.files)
        out.append(ShmListing(pairs, held, NOTE))
    return out
