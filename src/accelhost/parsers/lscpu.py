"""`lscpu -e=CPU,NODE` (CPU -> NUMA node) and `lscpu` (threads per core)."""

from __future__ import annotations

import re
from itertools import groupby
from operator import itemgetter

from accelhost.errors import ParseError

# A data row: optional indent, a CPU id, a node id. Rows with `-` as node are skipped.
_ROW = re.compile(r"^[ \t]*(\d+)[ \t]+(\d+)", re.MULTILINE)
_ANY_DIGIT_ROW = re.compile(r"^[ \t]*\d", re.MULTILINE)
# "0", "1", ... as lscpu prints CPU ids: comparing a column against it is cheaper than int().
_CANONICAL = [str(i) for i in range(8192)]
NO_NUMA = "lscpu command output error, no NUMA node available. Please check!"


def parse_cpu_nodes(text: str | None) -> tuple[dict[int, int], dict[int, tuple[int, ...]]]:
    """(cpu -> node, node -> CPUs in file order). Empty output gives two empty maps.

    Lines whose first non-blank character is a digit are rows `cpu node`; a row whose
    node is not a number (an offline CPU shows `-`) is skipped.
    """
    if not text:
        return {}, {}
    tokens = text.split()
    body = tokens[2:] if tokens[:2] == ["CPU", "NODE"] else tokens
    cpu_col, node_col = body[0::2], body[1::2]
    distinct = set(node_col)
    if (
        len(cpu_col) == len(node_col)
        and cpu_col == _CANONICAL[: len(cpu_col)]
        and all(n.isdigit() for n in distinct)
    ):
        # The usual shape: CPUs 0..n-1 in order, a handful of node ids. Converting each
        # distinct node id once keeps a 640-CPU host well under a tenth of a millisecond.
        as_int = {n: int(n) for n in distinct}
        nodes = list(map(as_int.__getitem__, node_col))
        cpu_node = dict(enumerate(nodes))
        grouped: dict[int, list[int]] = {}
        start = 0
        for node, run in groupby(nodes):
            count = len(list(run))
            grouped.setdefault(node, []).extend(range(start, start + count))
            start += count
        return cpu_node, {n: tuple(c) for n, c in grouped.items()}
    pairs = _ROW.findall(text)
    if not pairs and _ANY_DIGIT_ROW.search(text):
        bad = next(ln for ln in text.splitlines() if ln.strip()[:1].isdigit())
        raise ParseError("lscpu -e=CPU,NODE", f"cannot read row {bad.strip()!r}")
    cpus = [int(c) for c, _ in pairs]
    nodes = [int(n) for _, n in pairs]
    cpu_node = dict(zip(cpus, nodes, strict=True))
    grouped = {}
    for node, run_pairs in groupby(zip(nodes, cpus, strict=True), key=itemgetter(0)):
        grouped.setdefault(node, []).extend(map(itemgetter(1), run_pairs))
    return cpu_node, {n: tuple(c) for n, c in grouped.items()}


def parse_threads_per_core(text: str | None) -> int | None:
    """`Thread(s) per core:` of plain `lscpu`; None when absent or not a number."""
    if not text:
        return None
    for line in text.splitlines():
        if "Thread(s) per core:" in line:
            value = line.split(":", 1)[1].strip()
            return int(value) if value.isdigit() else None
    return None
