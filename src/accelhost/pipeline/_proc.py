"""The body of a worker process.

Strict request/response over one duplex pipe: the parent sends `(value,)` (a batch's
value is its list) or None to stop, the child answers `(ok, value_or_error, t0, t1)`.
One message in flight at a time, so neither side blocks on a full pipe and the parent
always knows which item a dead worker was on.
"""

from __future__ import annotations

import pickle
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any

from accelhost.pipeline._errors import exc_note


class RemoteError(Exception):
    """Stands in for an exception from a worker process that could not be pickled."""


def portable_error(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a RemoteError saying what it
    was; the worker's traceback, lost in pickling, travels as a note."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.loads(pickle.dumps(exc))
        out = exc
    except Exception:
        out = RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    out.__traceback__ = None
    exc_note(out, "traceback in the worker process:\n" + text.rstrip())
    return out


def child_main(fn: Callable[[Any], Any], conn: Connection) -> None:
    """Serve calls until told to stop (or until the parent is gone)."""
    # Ctrl-C reaches the whole process group; the parent decides how the pipeline ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if msg is None:
            return
        t0 = perf_counter()
        try:
            ok, value = True, fn(msg[0])
        except Exception as exc:
            ok, value = False, portable_error(exc)
        reply = (ok, value, t0, perf_counter())
        try:
            conn.send(reply)
        except (EOFError, OSError):
            return
        except Exception as exc:  # the result cannot be pickled: send why instead
            err = RemoteError(f"the stage's result cannot be sent back from the worker: {exc}")
            conn.send((False, err, reply[2], reply[3]))
