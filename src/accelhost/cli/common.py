"""Helpers shared by the command modules: host options, JSON and table output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from accelhost.host.base import Host


def add_snapshot_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--snapshot",
        metavar="FILE",
        help="replay a recorded host instead of reading this one "
        "(a file from `accelhost snapshot`, or example:NAME for a bundled one)",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def host_from_args(args: argparse.Namespace) -> Host:
    """The live host, or the snapshot named by --snapshot."""
    path = getattr(args, "snapshot", None)
    if path:
        from accelhost.host.snapshot import load_snapshot

        return load_snapshot(path)
    from accelhost.host.live import LiveHost

    return LiveHost()


def dumps_json(data: Any, indent: int = 2) -> str:
    """JSON with objects indented and lists of plain values on one line.

    A 640-CPU plan stays readable (`"pool": [0, 1, 2, ...]`) and diffable per device.
    """

    def fmt(value: Any, depth: int) -> str:
        pad = " " * (indent * (depth + 1))
        end = " " * (indent * depth)
        if isinstance(value, dict):
            if not value:
                return "{}"
            items = [f"{pad}{json.dumps(str(k))}: {fmt(v, depth + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + "\n" + end + "}"
        if isinstance(value, (list, tuple)):
            if all(not isinstance(v, (dict, list, tuple)) for v in value):
                return "[" + ", ".join(json.dumps(v) for v in value) + "]"
            items = [pad + fmt(v, depth + 1) for v in value]
            return "[\n" + ",\n".join(items) + "\n" + end + "]"
        return json.dumps(value)

    return fmt(data, 0)


def print_json(data: Any, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(dumps_json(data))
    stream.write("\n")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain aligned table: no colours, safe for pipes, logs and bug reports."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
