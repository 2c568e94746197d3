"""Optional NVML fallback (nvidia-ml-py) for GPUs that sysfs and `nvidia-smi topo -m` leave
without a NUMA node or CPU affinity.

Imported only when needed and only on a live host; a missing or failing NVML simply gives
nothing, because it is never more than a third opinion.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Sequence
from typing import Any

# nvml.h: NVML_AFFINITY_SCOPE_NODE; the CPU set is returned as an array of 64-bit words
_SCOPE_NODE = 0
_WORD_BITS = 64
_MAX_CPUS = 8192


def nvml_affinity(indices: Sequence[int]) -> dict[int, tuple[int | None, tuple[int, ...] | None]]:
    """GPU index -> (NUMA node or None, CPUs near it or None), for the GPUs NVML knows."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        return {}
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError has no stable base to name; any failure means "no answer"
        return {}
    out: dict[int, tuple[int | None, tuple[int, ...] | None]] = {}
    try:
        for index in indices:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except Exception:
                continue
            out[index] = (_node(nvml, handle), _cpus(nvml, handle))
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return out


def _node(nvml: Any, handle: Any) -> int | None:
    try:
        node = int(nvml.nvmlDeviceGetNumaNodeId(handle))
    except Exception:
        return None
    return node if node >= 0 else None


def _cpus(nvml: Any, handle: Any) -> tuple[int, ...] | None:
    try:
        words = nvml.nvmlDeviceGetCpuAffinityWithinScope(
            handle, _MAX_CPUS // _WORD_BITS, _SCOPE_NODE
        )
    except Exception:
        return None
    cpus = [
        w * _WORD_BITS + bit
        for w, word in enumerate(words)
        for bit in range(_WORD_BITS)
        if int(word) >> bit & 1
    ]
    return tuple(cpus) or None
