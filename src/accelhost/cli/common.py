"""Helpers shared by the command modules: host options, JSON and table output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from accelhost.errors import ParseError, UsageError
from accelhost.host.base import Host

# One default for every "how long may a process take to stop after SIGTERM" (run, clean,
# watch --auto-clean): Kubernetes' terminationGracePeriodSeconds, which operators know,
# and long enough for vLLM's own graceful shutdown.
DEFAULT_GRACE_S = 30.0


def device_ids(text: str) -> list[int]:
    """argparse type for --device: `0-3,5` -> [0, 1, 2, 3, 5]; a usage error otherwise."""
    from accelhost.cpulist import parse_device_list

    try:
        return parse_device_list(text)
    except ParseError as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None


def add_device_option(
    parser: argparse.ArgumentParser,
    help: str,
    *,
    required: bool = False,
) -> None:
    """`--device LIST` (alias `--devices`): device ids in the CPU-list grammar (`0-3,5`).

    The value is always a list; a command that takes one device checks with one_device().
    Ids are the host's (the `npu-smi info` / `nvidia-smi` index, the N of /dev/davinciN or
    /dev/nvidiaN), which is also what plan keys are.
    """
    parser.add_argument(
        "--device",
        "--devices",
        dest="device",
        type=device_ids,
        metavar="LIST",
        required=required,
        help=help,
    )


def one_device(args: argparse.Namespace, what: str = "this command") -> int | None:
    """The single id of --device, or None when it was not given; UsageError for several."""
    ids: list[int] | None = getattr(args, "device", None)
    if ids is None:
        return None
    if len(ids) != 1:
        raise UsageError(f"{what} takes one device, got --device {','.join(map(str, ids))}")
    return ids[0]


def pci_from_args(args: argparse.Namespace) -> list[str] | None:
    """`--pci ADDR[,ADDR...]` as the planner's PCI addresses, or None; bad ones are usage
    errors. Shared by topo, plan and the planning options of bind/exec/verify."""
    if getattr(args, "pci", None) is None:
        return None
    from accelhost.readers.gpu import pci_addresses

    try:
        return pci_addresses([args.pci])
    except ParseError as exc:
        raise UsageError(str(exc)) from None


def add_grace_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help=f"how long {what} may take to stop after SIGTERM before SIGKILL "
        f"(default {DEFAULT_GRACE_S:g})",
    )


def add_force_option(parser: argparse.ArgumentParser) -> None:
    """`--force`: bind, exec, verify and run --bind apply a plan made for another host."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="apply a --plan made for another host (one whose CPUs, NUMA nodes or devices "
        "are not this host's; refused without it)",
    )


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
    from accelhost.host.live import live_host

    return live_host()


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
