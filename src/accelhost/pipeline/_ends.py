"""The two ends of a run: the feeder that puts the caller's items in, and the reorder
buffer that hands the results out (bounded: under `ordered` the feeder lets at most
`RunSettings.window()` items be inside the run at once).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterable, Iterable
from typing import Any

from accelhost.pipeline._channel import Aborted
from accelhost.pipeline._run import Env, Run, ending


def start_feeder(r: Run, iterable: Iterable[Any]) -> None:
    """Feed `iterable` from a thread of the run's own (joined when the run ends)."""
    feeder = threading.Thread(
        target=feed, args=(r, iterable), name="accelhost-pipeline-feed", daemon=True
    )
    r.helpers.append(feeder)
    feeder.start()


_NOTE = "accelhost.pipeline: raised by the input iterable"


def feed(r: Run, iterable: Iterable[Any]) -> None:
    first, window = r.channels[0], r.settings.window()
    with ending(r, first, note=_NOTE):
        for item in iterable:
            if r.aborted:
                break
            if r.settings.ordered and r.fed - r.released >= window:
                _hurry(r, True)
                with r.window_cond:
                    r.feeder_waiting = True
                    try:
                        while r.fed - r.released >= window and not r.aborted:
                            r.window_cond.wait(0.1)
                    finally:
                        r.feeder_waiting = False
                _hurry(r, False)
                if r.aborted:
                    raise Aborted
            first.put_many([Env(r.fed, item, item)])
            r.fed += 1


async def afeed(r: Run, aiterable: AsyncIterable[Any]) -> None:
    first, window = r.channels[0], r.settings.window()
    with ending(r, first, note=_NOTE):
        async for item in aiterable:
            if r.aborted:
                break
            if r.settings.ordered and r.fed - r.released >= window:
                _hurry(r, True)
                while r.fed - r.released >= window:
                    if r.aborted:
                        raise Aborted
                    await asyncio.sleep(0.001)
                _hurry(r, False)
            await first.aput_many([Env(r.fed, item, item)])
            r.fed += 1


def _hurry(r: Run, on: bool) -> None:
    """While the window is full no item comes in until one leaves, and the one awaited may
    sit in a batch waiting to fill: batches go on as they are until the feeder goes on."""
    for ch in r.channels:
        ch.hurry(on)


def take(r: Run) -> list[Any] | None:
    """The next results for the caller, in the order they may leave; None at the end."""
    try:
        envs = r.channels[-1].get_many(1 << 16)
    except Aborted:
        return None
    return None if envs is None else _settle(r, envs)


async def atake(r: Run) -> list[Any] | None:
    """`take` for an event loop."""
    try:
        envs = await r.channels[-1].aget_many(1 << 16)
    except Aborted:
        return None
    return None if envs is None else _settle(r, envs)


def _settle(r: Run, envs: list[Env]) -> list[Any]:
    """Results of the items taken from the last channel that may leave now (under
    `ordered`, once every earlier one has); a failed item leaves as its error under
    on_error='return', not at all under 'skip', and frees its place either way."""
    if r.settings.ordered:
        ready: list[Env] = []
        pending, nxt = r.pending, r.next_seq
        for env in envs:
            if env.seq == nxt:
                ready.append(env)
                nxt += 1
                while nxt in pending:
                    ready.append(pending.pop(nxt))
                    nxt += 1
            else:
                pending[env.seq] = env
        r.next_seq = nxt
        envs = ready
    return_errors = r.settings.on_error == "return"
    out = [
        env.value if env.error is None else env.error
        for env in envs
        if env.error is None or return_errors
    ]
    r.released += len(envs)
    if r.feeder_waiting:
        with r.window_cond:
            r.window_cond.notify()
    return out
