"""The loop of a thread stage's worker, one item (or chunk, or batch) at a time.

Like every worker loop it ends on one of three signals only: end of stream on its input
channel (normal end), `Aborted` (teardown), or an error it reports with `fail` before
ending. Whatever happens it calls `producer_done` on its output channel, so the next stage
always learns that this worker is gone.
"""

from __future__ import annotations

from time import perf_counter

from accelhost.pipeline._channel import Aborted, Hold, collect_batch, drain
from accelhost.pipeline._errors import check_batch
from accelhost.pipeline._run import CHEAP_S, CHUNK_MAX, FLUSH_S, Env, Run, Worker


def thread_worker(r: Run, w: Worker) -> None:
    si = w.stage
    st = r.settings.stages[si]
    fn = st.fn
    inq, outq = r.channels[si], r.channels[si + 1]
    spans = w.spans
    try:
        if st.batch is not None:
            _thread_batches(r, w)
            return
        # A chunk waits in `todo` and its results in `done`, where the channels' getters
        # can reach them: if one call turns out slow, idle peers take the unstarted items
        # and the next stage the finished ones (see Hold), instead of both waiting for it.
        hold: Hold[Env] = Hold()
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
                        w.errors += 1
                        r.item_failed([env], si, exc)
                    hold.since = 0.0
                    t1 = perf_counter()
                    dt = t1 - t0
                    w.busy += dt
                    w.items += 1
                    w.calls += 1
                    cost = dt if w.calls == 1 else cost + (dt - cost) * 0.1
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
        w.ended = perf_counter()
        outq.producer_done()


def _thread_batches(r: Run, w: Worker) -> None:
    si = w.stage
    st = r.settings.stages[si]
    assert st.batch is not None
    fn, max_size, wait_s = st.fn, st.batch.max_size, st.batch.max_wait_ms / 1000
    inq, outq = r.channels[si], r.channels[si + 1]
    while True:
        got = inq.get_many(max_size)
        if got is None:
            return
        envs, eof = collect_batch(inq, got, max_size, wait_s)
        good = [e for e in envs if e.error is None]
        if good:
            values = [e.value for e in good]
            t0 = perf_counter()
            try:
                results = check_batch(si, st.label, values, fn(values))
            except Exception as exc:
                w.errors += len(good)
                r.item_failed(good, si, exc)
            else:
                for env, value in zip(good, results, strict=True):
                    env.value = value
            t1 = perf_counter()
            w.busy += t1 - t0
            w.items += len(good)
            w.calls += 1
            if w.spans is not None:
                w.spans.append((t0, t1, good[0].seq, len(good)))
        outq.put_many(envs)
        if eof:
            return
