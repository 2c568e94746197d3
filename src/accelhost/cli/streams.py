"""Standard output and error while a command runs: a reader that goes away ends the output,
never the command.

`accelhost doctor | head` closes the pipe after ten lines; Python then raises
BrokenPipeError from whatever `print` was running, deep inside the command, and the
verdict the command was about to return was lost (the pipeline exited 0 on a FAIL). Here
the first EPIPE points the stream's descriptor at /dev/null, so the rest of the output,
and the flush at exit, go nowhere quietly, and the command finishes and returns its own
status.
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, TextIO, cast


class ReaderGoneGuard:
    """Wraps one text stream; everything but `write` and `flush` is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._discard()
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._discard()
        except (OSError, ValueError):
            if not self.reader_gone:
                raise

    def _discard(self) -> None:
        """From now on the descriptor is /dev/null: what is still buffered is dropped
        there, and a command started later (exec, run) inherits no dead pipe."""
        self.reader_gone = True
        try:
            fd = self.stream.fileno()
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), fd)
        except (OSError, ValueError, io.UnsupportedOperation):
            return
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def guard(stream: TextIO) -> TextIO:
    """`stream` behind a `ReaderGoneGuard` (once: a guard is not wrapped again)."""
    if isinstance(stream, ReaderGoneGuard):
        return stream
    return cast(TextIO, ReaderGoneGuard(stream))
