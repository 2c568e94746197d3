"""Which devices a process sees, and in what order: the visible-devices variables.

The one reading of ASCEND_RT_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES (indices and
`GPU-<uuid>`), HIP_VISIBLE_DEVICES over ROCR_VISIBLE_DEVICES and NEURON_RT_VISIBLE_CORES,
and the one GPU UUID lookup. The order matters: entry i is what the process calls
`cuda:i` / `npu:i`, torchrun ranks the GPUs of a NUMA node by that ordinal, and a worker of
local rank R uses entry R (`accelhost.apply.identity`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from accelhost.errors import PlanError, UsageError
from accelhost.family import ASCEND_FAMILIES
from accelhost.topology import Accelerator

CUDA = "CUDA_VISIBLE_DEVICES"
ASCEND = "ASCEND_RT_VISIBLE_DEVICES"
HIP = "HIP_VISIBLE_DEVICES"
ROCR = "ROCR_VISIBLE_DEVICES"
NEURON = "NEURON_RT_VISIBLE_CORES"
# For a plan of no family (hand-written) or a PCI one, the first variable set, in this order.
ANY_VISIBLE = (ASCEND, CUDA, HIP, ROCR, NEURON)
_RANGE = re.compile(r"(\d+)-(\d+)")


def parse_visible(name: str, text: str) -> list[str]:
    """Entries of a visible-devices variable; Neuron's `0-3` ranges expanded (bounded)."""
    out: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        m = _RANGE.fullmatch(entry)
        if m and name == NEURON:
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo or hi - lo > 4096:
                raise UsageError(f"{name}={text}: bad range {entry!r}")
            out.extend(str(i) for i in range(lo, hi + 1))
        else:
            out.append(entry)
    return out


def visible_ids(text: str) -> list[int]:
    """A list of device ids (ASCEND_RT_VISIBLE_DEVICES as the Ascend planner reads it)."""
    try:
        return [int(v) for v in parse_visible(ASCEND, text)]
    except ValueError:
        raise PlanError(f"{ASCEND}={text!r} is not a comma-separated list of integers") from None


def visible_entries(env: Mapping[str, str], family: str | None) -> tuple[str | None, list[str]]:
    """(the variable that decides, its entries), or (None, []) when none is set.

    ROCm applies ROCR_VISIBLE_DEVICES first, then HIP_VISIBLE_DEVICES indexes into it.
    """
    names = (
        (ASCEND,) if family in ASCEND_FAMILIES else (CUDA,) if family == "nvidia" else ANY_VISIBLE
    )
    name = next((n for n in names if env.get(n, "").strip()), None)
    if name is None:
        return None, []
    entries = parse_visible(name, env[name])
    rocr = env.get(ROCR, "")
    if name != HIP or not rocr.strip():
        return name, entries
    under = parse_visible(ROCR, rocr)
    for h in entries:
        if not h.isdigit() or int(h) >= len(under):
            raise UsageError(f"{HIP} entry {h!r} is not an index into {ROCR}={rocr}")
    return name, [under[int(h)] for h in entries]


def is_uuid(entry: str) -> bool:
    return entry.upper().startswith(("GPU-", "MIG-"))


def by_uuid(entry: str, uuids: Mapping[str, int]) -> list[int]:
    """What the GPUs whose UUID starts with `entry` map to (a unique prefix is enough)."""
    wanted = entry.lower()
    return [value for uuid, value in uuids.items() if uuid.lower().startswith(wanted)]


def resolve_visible(
    env: str | None, gpus: Sequence[Accelerator], here: str = "this host"
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(GPU indices in CUDA ordinal order, messages): CUDA_VISIBLE_DEVICES as CUDA reads it:
    the list stops at the first entry that names no GPU; a GPU named twice is refused."""
    indices = sorted(g.index for g in gpus)
    if env is None:
        return tuple(indices), ()
    if not env.strip():
        return (), (f"{CUDA} is empty: no GPU is visible",)
    uuids = {g.uuid: g.index for g in gpus if g.uuid}
    out: list[int] = []
    for entry in parse_visible(CUDA, env):
        hits = by_uuid(entry, uuids) if is_uuid(entry) else [int(entry)] if entry.isdigit() else []
        if len(hits) != 1 or hits[0] not in indices:
            return tuple(out), (
                f"{CUDA}={env}: {entry!r} names no GPU on {here}; "
                "CUDA ignores it and every entry after it",
            )
        if hits[0] in out:
            raise PlanError(f"{CUDA}={env} names GPU {hits[0]} twice")
        out.append(hits[0])
    return tuple(out), ()
