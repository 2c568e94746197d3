"""Which GPUs a process sees, and in what order: `CUDA_VISIBLE_DEVICES` as CUDA reads it.

The order matters: entry i is what the process calls `cuda:i`, and torchrun ranks the GPUs
of a NUMA node by that ordinal.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelhost.errors import PlanError
from accelhost.topology import Accelerator


def resolve_visible(
    env: str | None, gpus: Sequence[Accelerator]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(GPU indices in CUDA ordinal order, messages).

    Unset: every GPU, by index. Entries are indices or `GPU-<uuid>` (a unique prefix is
    enough); like CUDA, the list stops at the first entry that names no GPU, with a
    message. A GPU named twice is refused (CUDA then sees no device at all).
    """
    by_index = {g.index: g for g in gpus}
    if env is None:
        return tuple(sorted(by_index)), ()
    if not env.strip():
        return (), ("CUDA_VISIBLE_DEVICES is empty: no GPU is visible",)
    out: list[int] = []
    messages: list[str] = []
    for raw in env.split(","):
        entry = raw.strip()
        index = _lookup(entry, gpus, by_index)
        if index is None:
            messages.append(
                f"CUDA_VISIBLE_DEVICES={env}: {entry!r} names no GPU on this host; "
                "CUDA ignores it and every entry after it"
            )
            break
        if index in out:
            raise PlanError(f"CUDA_VISIBLE_DEVICES={env} names GPU {index} twice")
        out.append(index)
    return tuple(out), tuple(messages)


def _lookup(
    entry: str, gpus: Sequence[Accelerator], by_index: dict[int, Accelerator]
) -> int | None:
    if entry.isdigit():
        value = int(entry)
        return value if value in by_index else None
    if entry.upper().startswith("GPU-"):
        wanted = entry.lower()
        hits = [g.index for g in gpus if g.uuid and g.uuid.lower().startswith(wanted)]
        return hits[0] if len(hits) == 1 else None
    return None
