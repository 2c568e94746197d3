"""The pipeline's error type and how an error is made to name the item that caused it."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from accelhost.errors import AccelhostError


class PipelineError(AccelhostError):
    """A pipeline set up wrongly, or failed for a reason other than an item (a stage
    function's own errors are re-raised as they are, with the failing item attached)."""


def exc_note(exc: BaseException, note: str) -> None:
    """add_note on 3.11+; on 3.10 the same __notes__ list, which tracebacks ignore there."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)
        return
    with contextlib.suppress(AttributeError):
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]  # type: ignore[attr-defined]


def short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def annotate(
    exc: BaseException, seqs: Sequence[int], items: Sequence[Any], stage: int, name: str
) -> None:
    """Attach the failing input item(s) so the user can tell which request failed."""
    if len(items) == 1:
        item: Any = items[0]
        index: Any = seqs[0]
        what = f"item #{index}: {short(item)}"
    else:
        item, index = list(items), list(seqs)
        what = f"a batch of {len(item)} items (#{index[0]}..#{index[-1]})"
    # an exception type with __slots__ takes no attributes: the note still tells
    with contextlib.suppress(AttributeError):
        exc.pipeline_item = item  # type: ignore[attr-defined]
        exc.pipeline_index = index  # type: ignore[attr-defined]
        exc.pipeline_stage = name  # type: ignore[attr-defined]
    exc_note(exc, f"accelhost.pipeline: raised in stage {stage + 1} ({name}) on {what}")


def stop_error(exc: BaseException) -> PipelineError:
    """StopIteration cannot leave a generator (PEP 479, it would become a bare
    RuntimeError): this error keeps the item and notes, the original as its __cause__."""
    text = str(exc)
    err = PipelineError(
        f"{type(exc).__name__}{': ' + text if text else ''} was raised in the pipeline; "
        "it cannot leave a generator, so it is this error's __cause__"
    )
    for attr in ("pipeline_item", "pipeline_index", "pipeline_stage"):
        if hasattr(exc, attr):
            setattr(err, attr, getattr(exc, attr))
    for note in getattr(exc, "__notes__", []):
        exc_note(err, note)
    return err


def check_batch(stage: int, name: str, values: list[Any], results: Any) -> list[Any]:
    """The results of a batched call as a list, or an error if they are not one per input."""
    try:
        out = list(results)
    except TypeError:
        out = None
    if out is None or len(out) != len(values):
        got = "a non-list" if out is None else f"{len(out)} results"
        raise PipelineError(
            f"stage {stage + 1} ({name}) is batched and must return one result "
            f"per input: got {got} for {len(values)} inputs"
        )
    return out
