"""The cleaner's journal: one JSON line per action, written and synced before the action.

Timestamps are RFC 3339 in UTC (`2026-12-01T03:12:01.123Z`), like the watch's log lines,
so that log collectors parse them without a format of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, TextIO

from accelhost.errors import AccelhostError
from accelhost.host.redact import redact_values

DEFAULT_JOURNAL = "/var/log/accelhost/clean.jsonl"


def rfc3339_now() -> str:
    """Now in UTC, RFC 3339 with milliseconds and a `Z`."""
    import datetime as dt  # here: `accelhost doctor` reads DEFAULT_JOURNAL, never the clock

    now = dt.datetime.now(dt.timezone.utc)
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Journal:
    """Append-only JSON lines, flushed and synced before the action it announces."""

    def __init__(self, path: str | Path) -> None:
        import uuid  # here, not at start-up: every command's parser reads DEFAULT_JOURNAL

        self.path = Path(path)
        self.run_id = uuid.uuid4().hex[:12]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh: TextIO = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise AccelhostError(
                f"cannot open the journal {self.path}: {exc.strerror}; "
                "give another one with --journal FILE"
            ) from None

    def write(self, event: str, **fields: Any) -> None:
        # journals are shipped: a command line in them is redacted (accelhost.host.redact)
        record = {"ts": rfc3339_now(), "run": self.run_id, "event": event, **redact_values(fields)}
        try:
            self._fh.write(json.dumps(record) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            # No record, no action: the caller stops before doing what was not journaled.
            raise AccelhostError(
                f"cannot write the journal {self.path}: {exc.strerror}; stopped before "
                f"the {fields.get('action', event)} it would record"
            ) from None

    def close(self) -> None:
        with contextlib.suppress(OSError):  # a full disk already reported by write()
            self._fh.close()
