"""The body of a worker process, kept in its own light module.

A spawned child imports only this module (and what the stage function needs), so a
worker starts in tens of milliseconds. The protocol is strict request/response over one
duplex pipe: the parent sends a list of values (or None to stop), the child answers with
one `(ok, value_or_error, t_start, t_end)` tuple per call. The parent never sends before
the previous answer arrived, so neither side can block the other on a full pipe.

A list of several values (a chunk of cheap items) may be answered in part: the child
answers once it has worked on the chunk for CHUNK_S, and it starts item i only while i is
below the shared `limit`, which the parent lowers to take back the unstarted rest of a
chunk stuck behind one slow call. Answers always cover a prefix of the chunk.
"""

from __future__ import annotations

import pickle
import signal
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from time import perf_counter
from typing import Any

Reply = tuple[bool, Any, float, float]

# A worker process answers a chunk after working on it this long, even if not finished
# (the same as the pipeline's STALL_S; kept here so that a child imports nothing more).
CHUNK_S = 1e-3

# Sent instead of a list of values: "send your last replies again, each pickled on its
# own", for when a reply arrived whole but cannot be unpickled in the parent (a value
# whose class rebuilds differently there); one bad result then fails only its own item.
RESEND = "accelhost-pipeline-resend"


class RemoteError(Exception):
    """Stands in for an exception from a worker process that could not be pickled."""


def portable_error(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a RemoteError that says what it was.

    The worker's traceback is lost in pickling; it travels as a note so the user still sees
    where in the worker the failure happened.
    """
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        pickle.loads(pickle.dumps(exc))
        out = exc
    except Exception:
        out = RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    out.__traceback__ = None
    note = "traceback in the worker process:\n" + text.rstrip()
    if hasattr(out, "add_note"):
        out.add_note(note)
    else:  # Python 3.10: keep it reachable all the same
        out.__notes__ = [*getattr(out, "__notes__", []), note]  # type: ignore[attr-defined]
    return out


def _picklable(reply: Reply) -> Reply:
    try:
        pickle.dumps(reply[1])
        return reply
    except Exception as exc:
        err = RemoteError(f"the stage's result cannot be sent back from the worker: {exc}")
        return (False, err, reply[2], reply[3])


def child_main(
    fn: Callable[[Any], Any],
    conn: Connection,
    batch: bool,
    current: Any,
    limit: Any,
    lock: Any,
) -> None:
    """Serve calls until told to stop; `current` (shared memory) holds the index in the
    chunk of the value being worked on, so that if this process dies the parent can name
    the exact item that killed it. `limit` and `lock`: see the module docstring."""
    # Ctrl-C reaches the whole process group; the parent decides how the pipeline ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from multiprocessing.reduction import ForkingPickler

    last: list[Reply] = []
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if msg is None:
            return
        if isinstance(msg, str):  # RESEND
            try:
                conn.send([bytes(ForkingPickler.dumps(r)) for r in last])
            except (EOFError, OSError):
                return
            continue
        calls = [msg] if batch else msg
        replies: list[Reply] = []
        start = end = perf_counter()
        for i, value in enumerate(calls):
            if batch or i == 0:
                current.value = i  # the first item is always done: answers are never empty
            else:
                if end - start > CHUNK_S:
                    break
                with lock:
                    if i >= limit.value:
                        break
                    current.value = i
            t0 = perf_counter()
            try:
                reply: Reply = (True, fn(value), t0, 0.0)
            except Exception as exc:
                reply = (False, portable_error(exc), t0, 0.0)
            end = perf_counter()
            replies.append((reply[0], reply[1], t0, end))
        try:
            conn.send(replies)
        except (EOFError, OSError):
            return
        except Exception:
            replies = [_picklable(r) for r in replies]
            conn.send(replies)
        last = replies
