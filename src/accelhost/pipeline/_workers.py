"""The loops that run inside a pipeline's threads, process drivers and event loop.

Each loop ends on one of three signals only: end of stream on its input channel (normal
end), `Aborted` from a channel or the abort pipe (teardown), or an error it reports with
`fail` before ending. Whatever happens it calls `producer_done` on its output channel, so
the next stage always learns that this worker is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import threading
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as mp_wait
from time import perf_counter
from typing import TYPE_CHECKING, Any

from accelhost.pipeline._channel import STALL_S, Aborted, Channel, Hold, drain
from accelhost.pipeline._core import (
    CHEAP_S,
    CHUNK_MAX,
    FLUSH_S,
    PipelineError,
    _annotate,
    _Env,
    _Run,
    _WorkerStats,
)

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess


def _item_failed(r: _Run, envs: list[_Env], si: int, exc: BaseException) -> None:
    """Record an item's error: fatal under on_error='raise', else carried downstream."""
    st = r.pipe.stages[si]
    _annotate(exc, envs, si, st.name or "")
    if r.pipe.on_error == "raise":
        r.fail(exc)
        raise Aborted
    for env in envs:
        env.error = exc


def _check_batch(si: int, r: _Run, values: list[Any], results: Any) -> list[Any]:
    try:
        out = list(results)
    except TypeError:
        out = None
    if out is None or len(out) != len(values):
        got = "a non-list" if out is None else f"{len(out)} results"
        raise PipelineError(
            f"stage {si + 1} ({r.pipe.stages[si].name}) is batched and must return one result "
            f"per input: got {got} for {len(values)} inputs"
        )
    return out


def _collect_batch(
    inq: Channel[_Env], first: list[_Env], max_size: int, wait_s: float
) -> tuple[list[_Env], bool]:
    """Top up a batch until it is full or its first item waited wait_s; (batch, eof)."""
    envs = first
    if len(envs) >= max_size or wait_s <= 0:
        return envs, False
    deadline = perf_counter() + wait_s
    while len(envs) < max_size:
        left = deadline - perf_counter()
        if left <= 0:
            break
        more = inq.get_many(max_size - len(envs), timeout=left)
        if more is None:
            return envs, True
        envs.extend(more)
    return envs, False


def thread_worker(r: _Run, si: int, ws: _WorkerStats) -> None:
    st = r.pipe.stages[si]
    fn = st.fn
    inq, outq = r.channels[si], r.channels[si + 1]
    spans = ws.spans
    try:
        if st.batch is not None:
            _thread_batches(r, si, ws)
            return
        # A chunk waits in `todo` and its results in `done`, where the channels' getters
        # can reach them: if one call turns out slow, idle peers take the unstarted items
        # and the next stage the finished ones (see Hold), instead of both waiting for it.
        hold: Hold[_Env] = Hold()
        todo, done = hold.todo, hold.done
        inq.add_hold(hold, consumer=True)
        outq.add_hold(hold, consumer=False)
        chunk = 1
        cost = 0.0  # running mean seconds per item, to choose the chunk size
        while True:
            envs = inq.get_many(chunk)
            if envs is None:
                return
            todo.extend(envs)
            flushed = perf_counter()
            while todo:
                try:
                    env = todo.popleft()
                except IndexError:  # a peer took the rest
                    break
                if env.error is None:
                    t0 = perf_counter()
                    hold.since = t0
                    try:
                        env.value = fn(env.value)
                    except Exception as exc:
                        hold.since = 0.0
                        ws.errors += 1
                        _item_failed(r, [env], si, exc)
                    hold.since = 0.0
                    t1 = perf_counter()
                    dt = t1 - t0
                    ws.busy += dt
                    ws.items += 1
                    ws.calls += 1
                    cost = dt if ws.calls == 1 else cost + (dt - cost) * 0.1
                    if spans is not None:
                        spans.append((t0, t1, env.seq, 1))
                else:
                    t1 = perf_counter()
                done.append(env)
                if t1 - flushed > FLUSH_S:
                    out = drain(done)
                    if out:
                        outq.put_many(out)
                    flushed = t1
            out = drain(done)
            if out:
                outq.put_many(out)
            chunk = CHUNK_MAX if cost < CHEAP_S else 1
    except Aborted:
        pass
    except BaseException as exc:  # a bug here or a BaseException from the stage
        r.fail(exc)
    finally:
        ws.ended = perf_counter()
        outq.producer_done()


def _thread_batches(r: _Run, si: int, ws: _WorkerStats) -> None:
    st = r.pipe.stages[si]
    assert st.batch is not None
    fn, max_size, wait_s = st.fn, st.batch.max_size, st.batch.max_wait_ms / 1000
    inq, outq = r.channels[si], r.channels[si + 1]
    while True:
        got = inq.get_many(max_size)
        if got is None:
            return
        envs, eof = _collect_batch(inq, got, max_size, wait_s)
        good = [e for e in envs if e.error is None]
        if good:
            values = [e.value for e in good]
            t0 = perf_counter()
            try:
                results = _check_batch(si, r, values, fn(values))
            except Exception as exc:
                ws.errors += len(good)
                _item_failed(r, good, si, exc)
            else:
                for env, value in zip(good, results, strict=True):
                    env.value = value
            t1 = perf_counter()
            ws.busy += t1 - t0
            ws.items += len(good)
            ws.calls += 1
            if ws.spans is not None:
                ws.spans.append((t0, t1, good[0].seq, len(good)))
        outq.put_many(envs)
        if eof:
            return


def process_driver(r: _Run, si: int, ws: _WorkerStats, pi: int) -> None:
    """Feed one worker process and watch it: a dead process fails the run, never hangs it."""
    proc, conn, current = r.procs[pi], r.conns[pi], r.currents[pi]
    st = r.pipe.stages[si]
    inq, outq = r.channels[si], r.channels[si + 1]
    batched = st.batch is not None
    max_size = st.batch.max_size if st.batch is not None else 1
    wait_s = st.batch.max_wait_ms / 1000 if st.batch is not None else 0.0
    # Items of a chunk that the worker process gives back unstarted wait in `todo`, where
    # idle peers can take them (see Hold and _Lender).
    hold: Hold[_Env] = Hold()
    if not batched:
        inq.add_hold(hold, consumer=True)
    lender = _Lender(hold, current, r.limits[pi], r.locks[pi])
    chunk = 1
    cost = 0.0
    stop_child = False
    try:
        while True:
            if hold.todo:
                got: list[_Env] | None = drain(hold.todo, chunk)
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
                envs, eof = _collect_batch(inq, got, max_size, wait_s)
            good = [e for e in envs if e.error is None]
            undone: list[_Env] = []
            if good:
                current.value = 0  # before sending: the child moves it from here on
                lender.lend(len(good) if not batched else 0)
                good = _send(r, si, ws, proc, conn, good, batched)
                values = [e.value for e in good]
                if not good:
                    lender.settle()
                else:
                    replies = _await_reply(
                        r, si, proc, conn, good, batched, current, lender if len(good) > 1 else None
                    )
                    if not batched and len(replies) < len(good):
                        # answered early (time cap) or gave the rest away (lender.revoke)
                        undone = good[len(replies) :]
                        good = good[: len(replies)]
                        hold.todo.extendleft(reversed(undone[: lender.given_at - len(good)]))
                    lender.settle()
                    if batched:
                        ok, value, t0, t1 = replies[0]
                        if ok:
                            try:
                                value = _check_batch(si, r, values, value)
                            except PipelineError as exc:
                                ok, value = False, exc
                        if ok:
                            for env, v in zip(good, value, strict=True):
                                env.value = v
                        else:
                            ws.errors += len(good)
                            _item_failed(r, good, si, value)
                        ws.busy += t1 - t0
                        ws.calls += 1
                        if ws.spans is not None:
                            ws.spans.append((t0, t1, good[0].seq, len(good)))
                    else:
                        for env, (ok, value, t0, t1) in zip(good, replies, strict=True):
                            if ok:
                                env.value = value
                            else:
                                ws.errors += 1
                                _item_failed(r, [env], si, value)
                            ws.busy += t1 - t0
                            ws.calls += 1
                            dt = t1 - t0
                            cost = dt if ws.calls == 1 else cost + (dt - cost) * 0.1
                            if ws.spans is not None:
                                ws.spans.append((t0, t1, env.seq, 1))
                    ws.items += len(good)
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
        ws.ended = perf_counter()
        if stop_child and not r.aborted:
            with contextlib.suppress(OSError):
                conn.send(None)
            proc.join(1.0)
        if proc.is_alive():
            proc.terminate()
            proc.join(1.0)
        outq.producer_done()


class _Lender:
    """The parent's side of a chunk lent to a worker process.

    The child claims each item of a chunk under `lock` before starting it, and only while
    its index is below `limit`. When the chunk has taken STALL_S (one call is slow),
    `revoke` lowers `limit` to just past the item the child is on and puts the rest in the
    hold's `todo`, where idle peers take them; the child answers for the items it did.
    """

    def __init__(self, hold: Hold[_Env], current: Any, limit: Any, lock: Any) -> None:
        self.hold, self.current, self.limit, self.lock = hold, current, limit, lock
        self.given_at = 0  # items from this index on were given to the hold on revoke
        self.sent = 0.0

    def lend(self, n: int) -> None:
        self.limit.value = n
        self.given_at = n
        self.hold.lent = max(0, n - 1)
        self.sent = perf_counter()

    def revoke(self, envs: list[_Env]) -> None:
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


def _send(
    r: _Run,
    si: int,
    ws: _WorkerStats,
    proc: BaseProcess,
    conn: Connection,
    envs: list[_Env],
    batched: bool,
) -> list[_Env]:
    """Send the values of envs to the worker; returns the envs that were sent.

    A value that cannot be pickled is that item's error, not its chunk's: the others are
    sent without it.
    """
    for attempt in range(2):
        try:
            conn.send([e.value for e in envs])
            return envs
        except (BrokenPipeError, EOFError, ConnectionResetError, OSError):
            _died(r, si, proc, envs, batched)
        except Exception as exc:
            bad = [e for e in envs if not _picklable(e.value)] if attempt == 0 else envs
            for env in bad or envs:
                ws.errors += 1
                _item_failed(r, [env], si, exc)
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
    r: _Run,
    si: int,
    proc: BaseProcess,
    conn: Connection,
    envs: list[_Env],
    batched: bool,
    current: Any,
    lender: _Lender | None = None,
) -> list[Any]:
    try:
        return _receive(r, si, proc, conn, envs, batched, current, lender)
    except _Undecodable:
        pass
    # The replies arrived whole but cannot be unpickled here: have them sent again one by
    # one, so that only the result that cannot be rebuilt fails, and it names its item.
    from accelhost.pipeline._proc import RESEND

    try:
        conn.send(RESEND)
    except OSError:
        _died(r, si, proc, envs, batched)
    replies: list[Any] = []
    for part in _receive(r, si, proc, conn, envs, batched, current):
        try:
            replies.append(pickle.loads(part))
        except Exception as exc:
            err = PipelineError(
                f"stage {si + 1} ({r.pipe.stages[si].name}): a result came back from the "
                f"worker process but cannot be unpickled here: {type(exc).__name__}: {exc}"
            )
            err.__cause__ = exc
            now = perf_counter()
            replies.append((False, err, now, now))
    return replies


class _Undecodable(Exception):
    """A reply that arrived in full but could not be unpickled."""


def _receive(
    r: _Run,
    si: int,
    proc: BaseProcess,
    conn: Connection,
    envs: list[_Env],
    batched: bool,
    current: Any,
    lender: _Lender | None = None,
) -> list[Any]:
    waits: list[Connection | int] = [conn, proc.sentinel, r.abort_r]
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
    if not batched and 0 <= current.value < len(envs):
        envs = [envs[current.value]]
    _died(r, si, proc, envs, batched)
    raise AssertionError("unreachable")


def _died(r: _Run, si: int, proc: BaseProcess, envs: list[_Env], batched: bool) -> None:
    """A worker process is gone: fail the run, naming the item (or batch) it was on."""
    proc.join(1.0)
    st = r.pipe.stages[si]
    if len(envs) == 1:
        what = f"item #{envs[0].seq}"
    else:
        what = f"{'a batch of' if batched else 'one of'} {len(envs)} items from #{envs[0].seq}"
    exc = PipelineError(
        f"stage {si + 1} ({st.name}): worker process {proc.pid} died "
        f"(exit code {proc.exitcode}) while working on {what}"
    )
    _annotate(exc, envs, si, st.name or "")
    r.fail(exc)
    raise Aborted


# -- async stages -------------------------------------------------------------------------
def loop_main(r: _Run, jobs: list[tuple[int, int, _WorkerStats]], ready: threading.Event) -> None:
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        r.tasks = [loop.create_task(_async_worker(r, si, ws)) for si, _, ws in jobs]
        r.loop = loop
        ready.set()
        if r.aborted:  # aborted before the loop existed: abort() could not cancel
            for t in r.tasks:
                t.cancel()
        loop.run_until_complete(asyncio.gather(*r.tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    except BaseException as exc:
        r.fail(exc)
    finally:
        ready.set()
        r.loop = None
        asyncio.set_event_loop(None)
        loop.close()


async def _async_worker(r: _Run, si: int, ws: _WorkerStats) -> None:
    st = r.pipe.stages[si]
    fn: Callable[[Any], Awaitable[Any]] = st.fn
    inq, outq = r.channels[si], r.channels[si + 1]
    max_size = st.batch.max_size if st.batch is not None else 1
    wait_s = st.batch.max_wait_ms / 1000 if st.batch is not None else 0.0
    try:
        while True:
            envs = await inq.aget_many(max_size)
            if envs is None:
                return
            eof = False
            if st.batch is not None and len(envs) < max_size and wait_s > 0:
                deadline = perf_counter() + wait_s
                while len(envs) < max_size:
                    left = deadline - perf_counter()
                    if left <= 0:
                        break
                    more = await inq.aget_many(max_size - len(envs), timeout=left)
                    if more is None:
                        eof = True
                        break
                    envs.extend(more)
            good = [e for e in envs if e.error is None]
            if good:
                t0 = perf_counter()
                if st.batch is not None:
                    values = [e.value for e in good]
                    try:
                        results = _check_batch(si, r, values, await fn(values))
                    except Exception as exc:
                        ws.errors += len(good)
                        _item_failed(r, good, si, exc)
                    else:
                        for env, v in zip(good, results, strict=True):
                            env.value = v
                else:
                    env = good[0]
                    try:
                        env.value = await fn(env.value)
                    except Exception as exc:
                        ws.errors += 1
                        _item_failed(r, [env], si, exc)
                t1 = perf_counter()
                ws.busy += t1 - t0
                ws.items += len(good)
                ws.calls += 1
                if ws.spans is not None:
                    ws.spans.append((t0, t1, good[0].seq, len(good)))
            await outq.aput_many(envs)
            if eof:
                return
    except (Aborted, asyncio.CancelledError):
        pass
    except BaseException as exc:
        r.fail(exc)
    finally:
        ws.ended = perf_counter()
        outq.producer_done()
