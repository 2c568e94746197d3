"""What `watch --auto-clean` sees and leaves in place, said once per leftover.

A leftover the watch reports every round but never removes looks like a watch that does
not work. Each one it keeps gets one log line (`auto_clean_kept`): why it stays, and the
command a person runs to remove it. It is said again only if it goes and comes back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelhost.hygiene.doctor.evidence import clean_command
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
    _said: set[tuple[str, Any, Any]] = field(default_factory=set)

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
        # (option, what it names, what tells it from a namesake) -> its note
        notes: dict[tuple[str, Any, Any], dict[str, Any]] = {}

        def note(key: tuple[str, Any, Any], kind: str, why: str, **ident: Any) -> None:
            command = clean_command(self.options, named=(f"--{key[0]}", str(key[1])))
            event = {"event": "auto_clean_kept", "kind": kind, **ident, "reason": why}
            notes[key] = {**event, "command": command}

        for o in orphans:
            if o.group_frontend is not None:
                why, pid = FRONTEND_LIVES.format(pid=o.group_frontend), o.proc.pid
                note(("pid", pid, o.proc.start_ticks), "orphan", why, pid=pid)
        segments = [(s, NOT_AN_ENGINES) for s, _ in unasked] + [(s, under) for s, _ in waiting]
        for seg, why in segments:
            note(("shmid", seg.shmid, seg.ctime), "segment", why, shmid=seg.shmid, bytes=seg.size)
        for f in (j.file for j in files):
            note(("path", f.path, f.inode), "shm_file", under, path=f.path, bytes=f.used_bytes)
        for key, event in notes.items():
            if key not in self._said:
                self.log(event)
        self._said = set(notes)  # a leftover gone and back is said again
