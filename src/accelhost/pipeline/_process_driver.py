"""The thread that feeds one worker process and watches it: a dead process fails the run,
naming its item, and never hangs it (every wait also watches its sentinel and the abort pipe).
"""

from __future__ import annotations

import contextlib
import pickle
from multiprocessing.connection import wait as mp_wait
from time import perf_counter
from typing import Any

from accelhost.pipeline._channel import Aborted, collect_batch
from accelhost.pipeline._errors import PipelineError, annotate
from accelhost.pipeline._run import Env, Run, Worker

Reply = tuple[bool, Any, float, float]


def process_driver(r: Run, w: Worker) -> None:
    link = w.link
    assert link is not None
    si = w.stage
    st = r.settings.stages[si]
    inq, outq = r.channels[si], r.channels[si + 1]
    batched = st.batch is not None
    size = st.batch.max_size if st.batch is not None else 1
    wait_s = st.batch.max_wait_ms / 1000 if st.batch is not None else 0.0
    stop_child = False
    try:
        while (got := inq.get_many(size)) is not None:
            envs, eof = collect_batch(inq, got, size, wait_s)
            good = _send(r, w, [e for e in envs if e.error is None], batched)
            if good:
                ok, value, t0, t1 = _receive(r, w, good, batched)
                w.did(t0, t1, good[0].seq, len(good))
                r.outcome(w, good, ok, value, batched)
            outq.put_many(envs)
            if eof:
                break
        stop_child = True
    except Aborted:
        pass
    except BaseException as exc:
        r.fail(exc)
    finally:
        proc = link.proc
        if stop_child and not r.aborted:
            with contextlib.suppress(OSError):
                link.conn.send(None)
            proc.join(1.0)
        if proc.is_alive():
            proc.terminate()
            proc.join(1.0)
        outq.producer_done()


def _send(r: Run, w: Worker, good: list[Env], batched: bool) -> list[Env]:
    """Send one item's value (or one batch's); the items sent. A value that cannot be
    pickled is that item's error, not its batch's."""
    assert w.link is not None
    while good:
        try:
            w.link.conn.send(([e.value for e in good] if batched else good[0].value,))
            return good
        except (EOFError, OSError):
            _died(r, w, good, batched)
        except Exception as exc:
            bad = [e for e in good if not _picklable(e.value)] or good
            for env in bad:
                w.errors += 1
                r.item_failed([env], w.stage, exc)
            good = [e for e in good if e not in bad]
    return good


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


def _receive(r: Run, w: Worker, good: list[Env], batched: bool) -> Reply:
    link = w.link
    assert link is not None
    if link.conn in mp_wait([link.conn, link.proc.sentinel, r.abort_r]):
        try:
            reply: Reply = link.conn.recv()
            return reply
        except (EOFError, OSError):
            pass
        except Exception as exc:  # it arrived whole, but its class rebuilds differently here
            err = PipelineError(
                f"stage {w.stage + 1} ({r.settings.stages[w.stage].label}): a result came "
                f"back from the worker process but cannot be unpickled here: "
                f"{type(exc).__name__}: {exc}"
            )
            err.__cause__ = exc
            now = perf_counter()
            return (False, err, now, now)
    if r.aborted:
        raise Aborted
    _died(r, w, good, batched)
    raise AssertionError("unreachable")


def _died(r: Run, w: Worker, envs: list[Env], batched: bool) -> None:
    """A worker process is gone: fail the run, naming the item (or batch) it was on."""
    assert w.link is not None
    proc = w.link.proc
    proc.join(1.0)
    name = r.settings.stages[w.stage].label
    what = f"a batch of {len(envs)} items from #" if batched else "item #"
    exc = PipelineError(
        f"stage {w.stage + 1} ({name}): worker process {proc.pid} died "
        f"(exit code {proc.exitcode}) while working on {what}{envs[0].seq}"
    )
    annotate(exc, [e.seq for e in envs], [e.item for e in envs], w.stage, name)
    r.fail(exc)
    raise Aborted
