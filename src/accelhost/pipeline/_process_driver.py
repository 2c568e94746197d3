"""The thread that feeds one worker process and watches it.

A dead process fails the run, naming the item it was on; it never hangs it: every wait
here also watches the process's sentinel and the run's abort pipe. The ending rules are
those of every worker loop (see _thread_worker).
"""

from __future__ import annotations

import contextlib
import pickle
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from time import perf_counter
from typing import Any

from accelhost.pipeline._channel import STALL_S, Aborted, Hold, collect_batch, drain
from accelhost.pipeline._errors import PipelineError, annotate, check_batch
from accelhost.pipeline._proc import RESEND
from accelhost.pipeline._run import CHEAP_S, CHUNK_MAX, Env, ProcessLink, Run, Worker


def process_driver(r: Run, w: Worker) -> None:
    link = w.link
    assert link is not None
    si = w.stage
    st = r.settings.stages[si]
    inq, outq = r.channels[si], r.channels[si + 1]
    batched = st.batch is not None
    max_size = st.batch.max_size if st.batch is not None else 1
    wait_s = st.batch.max_wait_ms / 1000 if st.batch is not None else 0.0
    # Items of a chunk that the worker process gives back unstarted wait in `todo`, where
    # idle peers can take them (see Hold and _Lender).
    hold: Hold[Env] = Hold()
    if not batched:
        inq.add_hold(hold, consumer=True)
    lender = _Lender(hold, link)
    chunk = 1
    cost = 0.0
    stop_child = False
    try:
        while True:
            if hold.todo:
                got: list[Env] | None = drain(hold.todo, chunk)
                if not got:  # peers took them
                    continue
            else:
                got = inq.get_many(max_size if batched else chunk)
            if got is None:
                stop_child = True
                return
            eof = False
            envs = got
            if batched:
                envs, eof = collect_batch(inq, got, max_size, wait_s)
            good = [e for e in envs if e.error is None]
            undone: list[Env] = []
            if good:
                link.current.value = 0  # before sending: the child moves it from here on
                lender.lend(len(good) if not batched else 0)
                good = _send(r, w, good, batched)
                values = [e.value for e in good]
                if not good:
                    lender.settle()
                else:
                    replies = _await_reply(r, w, good, batched, lender if len(good) > 1 else None)
                    if not batched and len(replies) < len(good):
                        # answered early (time cap) or gave the rest away (lender.revoke)
                        undone = good[len(replies) :]
                        good = good[: len(replies)]
                        hold.todo.extendleft(reversed(undone[: lender.given_at - len(good)]))
                    lender.settle()
                    if batched:
                        _batch_done(r, w, good, values, replies[0])
                    else:
                        for env, (ok, value, t0, t1) in zip(good, replies, strict=True):
                            if ok:
                                env.value = value
                            else:
                                w.errors += 1
                                r.item_failed([env], si, value)
                            w.busy += t1 - t0
                            w.calls += 1
                            dt = t1 - t0
                            cost = dt if w.calls == 1 else cost + (dt - cost) * 0.1
                            if w.spans is not None:
                                w.spans.append((t0, t1, env.seq, 1))
                    w.items += len(good)
            if undone:
                skip = {id(e) for e in undone}
                envs = [e for e in envs if id(e) not in skip]
            if envs:
                outq.put_many(envs)
            if eof:
                stop_child = True
                return
            chunk = CHUNK_MAX if cost < CHEAP_S else 1
    except Aborted:
        pass
    except BaseException as exc:
        r.fail(exc)
    finally:
        w.ended = perf_counter()
        proc = link.proc
        if stop_child and not r.aborted:
            with contextlib.suppress(OSError):
                link.conn.send(None)
            proc.join(1.0)
        if proc.is_alive():
            proc.terminate()
            proc.join(1.0)
        outq.producer_done()


def _batch_done(r: Run, w: Worker, good: list[Env], values: list[Any], reply: Any) -> None:
    st = r.settings.stages[w.stage]
    ok, value, t0, t1 = reply
    if ok:
        try:
            value = check_batch(w.stage, st.label, values, value)
        except PipelineError as exc:
            ok, value = False, exc
    if ok:
        for env, v in zip(good, value, strict=True):
            env.value = v
    else:
        w.errors += len(good)
        r.item_failed(good, w.stage, value)
    w.busy += t1 - t0
    w.calls += 1
    if w.spans is not None:
        w.spans.append((t0, t1, good[0].seq, len(good)))


class _Lender:
    """The parent's side of a chunk lent to a worker process.

    The child claims each item of a chunk under `lock` before starting it, and only while
    its index is below `limit`. When the chunk has taken STALL_S (one call is slow),
    `revoke` lowers `limit` to just past the item the child is on and puts the rest in the
    hold's `todo`, where idle peers take them; the child answers for the items it did.
    """

    def __init__(self, hold: Hold[Env], link: ProcessLink) -> None:
        self.hold, self.current, self.limit, self.lock = hold, link.current, link.limit, link.lock
        self.given_at = 0  # items from this index on were given to the hold on revoke
        self.sent = 0.0

    def lend(self, n: int) -> None:
        self.limit.value = n
        self.given_at = n
        self.hold.lent = max(0, n - 1)
        self.sent = perf_counter()

    def revoke(self, envs: list[Env]) -> None:
        # a child killed while it held the lock never releases it: then keep the chunk
        # and go back to watching the child, which reports its death
        if not self.lock.acquire(timeout=0.1):
            return
        try:
            stop = self.current.value + 1
            if stop >= self.limit.value:
                return
            self.limit.value = stop
        finally:
            self.lock.release()
        self.given_at = stop
        hold = self.hold
        hold.since = self.sent  # more than STALL_S ago: idle peers may take them now
        hold.todo.extend(envs[stop:])

    def settle(self) -> None:
        self.hold.since = 0.0
        self.hold.lent = 0


def _send(r: Run, w: Worker, envs: list[Env], batched: bool) -> list[Env]:
    """Send the values of envs to the worker; returns the envs that were sent.

    A value that cannot be pickled is that item's error, not its chunk's: the others are
    sent without it.
    """
    assert w.link is not None
    for attempt in range(2):
        try:
            w.link.conn.send([e.value for e in envs])
            return envs
        except (BrokenPipeError, EOFError, ConnectionResetError, OSError):
            _died(r, w, envs, batched)
        except Exception as exc:
            bad = [e for e in envs if not _picklable(e.value)] if attempt == 0 else envs
            for env in bad or envs:
                w.errors += 1
                r.item_failed([env], w.stage, exc)
            envs = [e for e in envs if e not in bad] if bad else []
            if not envs:
                return []
    return []


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
        return True
    except Exception:
        return False


def _await_reply(
    r: Run, w: Worker, envs: list[Env], batched: bool, lender: _Lender | None = None
) -> list[Any]:
    assert w.link is not None
    try:
        return _receive(r, w, envs, batched, lender)
    except _Undecodable:
        pass
    # The replies arrived whole but cannot be unpickled here: have them sent again one by
    # one, so that only the result that cannot be rebuilt fails, and it names its item.
    try:
        w.link.conn.send(RESEND)
    except OSError:
        _died(r, w, envs, batched)
    replies: list[Any] = []
    for part in _receive(r, w, envs, batched):
        try:
            replies.append(pickle.loads(part))
        except Exception as exc:
            err = PipelineError(
                f"stage {w.stage + 1} ({r.settings.stages[w.stage].label}): a result came "
                f"back from the worker process but cannot be unpickled here: "
                f"{type(exc).__name__}: {exc}"
            )
            err.__cause__ = exc
            now = perf_counter()
            replies.append((False, err, now, now))
    return replies


class _Undecodable(Exception):
    """A reply that arrived in full but could not be unpickled."""


def _receive(
    r: Run, w: Worker, envs: list[Env], batched: bool, lender: _Lender | None = None
) -> list[Any]:
    link = w.link
    assert link is not None
    conn: Connection = link.conn
    waits: list[Connection | int] = [conn, link.proc.sentinel, r.abort_r]
    ready = mp_wait(waits, STALL_S if lender is not None else None)
    if not ready and lender is not None:  # a slow call: let peers have the rest
        lender.revoke(envs)
        ready = mp_wait(waits)
    if conn in ready:
        try:
            replies: list[Any] = conn.recv()
            return replies
        except (EOFError, OSError):
            pass
        except Exception as exc:
            raise _Undecodable from exc
    if r.aborted:
        raise Aborted
    current = link.current.value
    if not batched and 0 <= current < len(envs):
        envs = [envs[current]]
    _died(r, w, envs, batched)
    raise AssertionError("unreachable")


def _died(r: Run, w: Worker, envs: list[Env], batched: bool) -> None:
    """A worker process is gone: fail the run, naming the item (or batch) it was on."""
    assert w.link is not None
    proc = w.link.proc
    proc.join(1.0)
    name = r.settings.stages[w.stage].label
    if len(envs) == 1:
        what = f"item #{envs[0].seq}"
    else:
        what = f"{'a batch of' if batched else 'one of'} {len(envs)} items from #{envs[0].seq}"
    exc = PipelineError(
        f"stage {w.stage + 1} ({name}): worker process {proc.pid} died "
        f"(exit code {proc.exitcode}) while working on {what}"
    )
    annotate(exc, [e.seq for e in envs], [e.item for e in envs], w.stage, name)
    r.fail(exc)
    raise Aborted
