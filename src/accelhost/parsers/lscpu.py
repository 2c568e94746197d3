"""`lscpu -e=CPU,NODE` (CPU -> NUMA node) and `lscpu` (threads per core)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from itertools import groupby
from operator import itemgetter

from accelhost.cpulist import IDS, MAX_CPUS, MAX_NODES, parse_id
from accelhost.errors import ParseError

_ROW = re.compile(r"^[ \t]*([0-9]+)[ \t]+([0-9]+)", re.MULTILINE)
_ANY_DIGIT_ROW = re.compile(r"^[ \t]*[0-9]", re.MULTILINE)
# "0", "1", ... as lscpu prints CPU ids: comparing a column against it is cheaper than int().
_CANONICAL = [str(i) for i in range(MAX_CPUS)]
SOURCE = "lscpu -e=CPU,NODE"
# A row is `cpu node` padded to a few columns; 64 bytes a row is far more than lscpu
# prints, and refusing anything longer unsplit keeps a giant table from costing memory.
_MAX_TEXT = 64 * (MAX_CPUS + 1)


class CpuNodes(Mapping[int, int]):
    """cpu -> node for CPUs numbered 0..n-1, held as one list.

    The common shape of `lscpu -e`: a 640-CPU host then costs a list of node ids rather
    than a 640-entry dict, which is most of what parsing that output used to cost.
    """

    __slots__ = ("_nodes",)

    def __init__(self, nodes: list[int]) -> None:
        self._nodes = nodes

    def __getitem__(self, cpu: int) -> int:
        if type(cpu) is int and 0 <= cpu < len(self._nodes):
            return self._nodes[cpu]
        raise KeyError(cpu)

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self._nodes)))

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"CpuNodes({dict(enumerate(self._nodes))!r})"


def parse_cpu_nodes(text: str | None) -> tuple[Mapping[int, int], dict[int, tuple[int, ...]]]:
    """(cpu -> node, node -> CPUs in file order). Empty output gives two empty maps.

    Lines whose first non-blank character is a digit are rows `cpu node`; a row whose
    node is not a number (an offline CPU shows `-`) is skipped.
    """
    if not text:
        return {}, {}
    if len(text) > _MAX_TEXT:
        raise ParseError(SOURCE, f"{len(text)} bytes: more rows than a kernel has CPUs")
    tokens = text.split()
    first = 2 if tokens[:2] == ["CPU", "NODE"] else 0
    cpu_col, node_col = tokens[first::2], tokens[first + 1 :: 2]
    n = len(cpu_col)
    if n == len(node_col) and cpu_col == _CANONICAL[:n]:
        # The usual shape: CPUs 0..n-1 in order, nodes in a few runs. Work per run, not
        # per CPU: a 640-CPU host is eight runs.
        runs = [(node, len(list(run))) for node, run in groupby(node_col)]
        if all(node.isdigit() for node, _ in runs):
            nodes: list[int] = []
            grouped: dict[int, list[int]] = {}
            for node_text, count in runs:
                node = parse_id(node_text, SOURCE, MAX_NODES, "NUMA node")
                at = len(nodes)
                grouped.setdefault(node, []).extend(IDS[at : at + count])
                nodes += [node] * count
            return CpuNodes(nodes), {n: tuple(c) for n, c in grouped.items()}
    pairs = _ROW.findall(text)
    if not pairs and _ANY_DIGIT_ROW.search(text):
        bad = next(ln for ln in text.splitlines() if _ANY_DIGIT_ROW.match(ln))
        raise ParseError(SOURCE, f"cannot read row {bad.strip()[:60]!r}")
    if len(pairs) > MAX_CPUS:
        raise ParseError(SOURCE, f"{len(pairs)} rows: more CPUs than a kernel can have")
    cpus = [parse_id(c, SOURCE, MAX_CPUS, "CPU") for c, _ in pairs]
    node_ids = [parse_id(n, SOURCE, MAX_NODES, "NUMA node") for _, n in pairs]
    cpu_node = dict(zip(cpus, node_ids, strict=True))
    by_node: dict[int, list[int]] = {}
    for node, run_pairs in groupby(zip(node_ids, cpus, strict=True), key=itemgetter(0)):
        by_node.setdefault(node, []).extend(map(itemgetter(1), run_pairs))
    return cpu_node, {n: tuple(c) for n, c in by_node.items()}


def parse_threads_per_core(text: str | None) -> int | None:
    """`Thread(s) per core:` of plain `lscpu`; None when absent or not a number."""
    for line in (text or "").splitlines():
        if "Thread(s) per core:" in line:
            value = line.split(":", 1)[1].strip()
            return int(value) if value.isascii() and value.isdigit() and len(value) < 4 else None
    return None
