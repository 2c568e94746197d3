"""`npu-smi info -t topo`: the CPU affinity of each NPU.

Only lines starting with `NPU` at column 0 count; their first token is `NPU<n>` and their
last token must be a CPU list. Indented header lines, `Legend:` blocks and matrices with
no CPU Affinity column give nothing.
"""

from __future__ import annotations

from accelhost.cpulist import MAX_DEVICES, parse_cpulist
from accelhost.errors import ParseError

SOURCE = "npu-smi info -t topo"


def parse_npu_topo(text: str | None) -> dict[int, tuple[int, ...]]:
    """NPU index -> affinity CPUs in written order."""
    out: dict[int, tuple[int, ...]] = {}
    if not text:
        return out
    # NPUs usually share a handful of affinity lists (all 16 on an A3): parse each once.
    seen: dict[str, tuple[int, ...] | None] = {}
    for line in text.splitlines():
        if not line.startswith("NPU"):
            continue
        # only the first and the last token matter: no need to split the whole matrix row
        head, _, rest = line.partition(" ")
        first = head.split("\t", 1)[0]
        if not first[3:].isdecimal() or not rest.strip():
            continue
        last = line.rsplit(None, 1)[-1]
        if not last[:1].isdigit():
            continue
        if last not in seen:
            try:
                seen[last] = tuple(parse_cpulist(last, SOURCE))
            except ParseError:
                seen[last] = None
        cpus = seen[last]
        if cpus is not None:
            try:
                npu = int(first[3:])
            except ValueError:  # thousands of digits
                npu = MAX_DEVICES
            if npu >= MAX_DEVICES:
                raise ParseError(SOURCE, f"NPU id beyond what a host can have: {first[:20]!r}")
            out[npu] = cpus
    return out
