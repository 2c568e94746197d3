"""What `watch --auto-clean` sees and leaves in place, said once per leftover.

A leftover the watch reports every round but never removes looks like a watch that does
not work. Each one it keeps gets one log line (`auto_clean_kept`): why it stays, and the
command a person runs to remove it. It is said again only if it goes and comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelhost.hygiene.doctor.fixes import clean_command
from accelhost.hygiene.judge.rules import LeakVerdict, Orphan, ShmVerdict
from accelhost.hygiene.options import HygieneOptions
from accelhost.parsers.sysvipc import ShmSegment

NOT_AN_ENGINES = (
    "no engine process was seen making it (a segment may be how another program keeps "
    "state between its processes): --auto-clean removes only segments it saw an engine "
    "make; a person decides"
)
FRONTEND_LIVES = (
    "a frontend of its engine, pid {pid}, lives in its process group (its server may be "
    "stopping it): --auto-clean never stops such a tree; a person decides"
)
UNDER_THRESHOLD = "{leaked} B leaked in all, under --clean-leaked-bytes {limit}"


@dataclass
class KeptNotes:
    log: Callable[[dict[str, Any]], None]
    options: HygieneOptions
    clean_leaked_bytes: int
    _said: set[Hashable] = field(default_factory=set)

    def say(
        self,
        orphans: Sequence[Orphan],
        unasked: Sequence[tuple[ShmSegment, LeakVerdict]],
        waiting: Sequence[tuple[ShmSegment, LeakVerdict]],
        files: Sequence[ShmVerdict],
        leaked: int,
    ) -> None:
        """`unasked`: leaked segments no engine was seen making; `waiting` and `files`:
        what stays below the byte threshold (empty when the round cleans); `leaked`: the
        bytes the threshold was weighed on."""
        under = UNDER_THRESHOLD.format(leaked=leaked, limit=self.clean_leaked_bytes)
        # (key, kind, what names it, why it stays, the clean option that names it)
        kept: list[tuple[Hashable, str, dict[str, Any], str, tuple[str, str]]] = []
        for o in orphans:
            if o.group_frontend is not None:
                why = FRONTEND_LIVES.format(pid=o.group_frontend)
                pid = o.proc.pid
                kept.append((("pid", pid, o.proc.start_ticks), "orphan", {"pid": pid}, why,
                             ("--pid", str(pid))))  # fmt: skip
        segments = [(s, NOT_AN_ENGINES) for s, _ in unasked] + [(s, under) for s, _ in waiting]
        for seg, why in segments:
            kept.append((("shmid", seg.shmid, seg.ctime), "segment",
                         {"shmid": seg.shmid, "bytes": seg.size}, why,
                         ("--shmid", str(seg.shmid))))  # fmt: skip
        for f in (j.file for j in files):
            kept.append((("path", f.path, f.inode), "shm_file",
                         {"path": f.path, "bytes": f.used_bytes}, under,
                         ("--path", f.path)))  # fmt: skip
        notes = [self._note(*entry) for entry in kept]
        for key, event in notes:
            if key not in self._said:
                self.log(event)
        self._said = {key for key, _ in notes}  # a leftover gone and back is said again

    def _note(
        self, key: Hashable, kind: str, ident: dict[str, Any], why: str, named: tuple[str, str]
    ) -> tuple[Hashable, dict[str, Any]]:
        command = clean_command(self.options, named=named)
        event = {"event": "auto_clean_kept", "kind": kind, **ident, "reason": why}
        return key, {**event, "command": command}
