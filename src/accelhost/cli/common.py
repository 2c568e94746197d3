"""What the command modules share besides their options (those are in `options`): the
one device of --device, --pci as addresses, the host to read, JSON output, and the roles
and the plan the bind family and `plan` read from their options."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from accelhost.errors import ParseError, UsageError
from accelhost.host.base import Host
from accelhost.render import isatty

if TYPE_CHECKING:
    from accelhost.planner.roles import RoleSpec


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
    errors."""
    if getattr(args, "pci", None) is None:
        return None
    from accelhost.readers.gpu import pci_addresses

    try:
        return pci_addresses([args.pci])
    except ParseError as exc:
        raise UsageError(str(exc)) from None


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
    print(dumps_json(data), file=out)


def warn(lines: Iterable[str]) -> None:
    for line in lines:
        print(f"accelhost: warning: {line}", file=sys.stderr)


def thread_roles(args: argparse.Namespace) -> list[RoleSpec]:
    """--thread-role through the planner's one role parser (see `options.thread_role`)."""
    from accelhost.planner.roles import parse_role_spec

    return [parse_role_spec(text) for text in getattr(args, "thread_role", ())]


def command_after_dashes(argv: Sequence[str], missing: str) -> list[str]:
    """The COMMAND of `... -- COMMAND [ARG...]` (exec, run, bench bind); UsageError
    `missing` when there is none."""
    words = list(argv[1:] if argv[:1] == ["--"] else argv)
    if not words:
        raise UsageError(missing)
    return words


def planning_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`options.planning` and --device-type as keywords of `api.plan` (and
    `plan_for_device`): one reading for `plan` and for bind/exec/verify without --plan."""
    if args.reserve_irq < 0:
        raise UsageError("--reserve-irq must be 0 or more")
    return {
        "device_type": args.device_type,
        "strategy": args.strategy,
        "pci": pci_from_args(args),
        "numa_from": args.numa_from,
        "reserve_irq": args.reserve_irq,
    }


def command(
    parser: argparse.ArgumentParser,
    func: Callable[[argparse.Namespace], int],
    description: str,
    epilog: str | None = None,
) -> None:
    """Make `parser`, made by main.py with the command's help line, the command's own."""
    parser.description = description
    parser.epilog = epilog
    parser.set_defaults(func=func)


def terminal_columns(stream: TextIO) -> int | None:
    """The width output to `stream` must fit: $COLUMNS when set, else the terminal's;
    None for a pipe or a file (no limit: logs and scripts get whole lines)."""
    env = os.environ.get("COLUMNS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    if not isatty(stream):
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        return None


def colour_wanted(stream: TextIO) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    return isatty(stream) and not os.environ.get("NO_COLOR")


def fit(line: str, columns: int | None) -> list[str]:
    """`line` wrapped to `columns` (None: as it is); continuation lines are indented past
    the line's own indent and any `N. ` numbering, and paths are never cut."""
    if columns is None or len(line) <= columns:
        return [line]
    import re
    import textwrap

    numbered = re.match(r"\s*(?:\d+\.\s)?", line)
    lead = len(numbered.group(0)) if numbered else 0
    return textwrap.wrap(
        line,
        columns,
        subsequent_indent=" " * (lead + 2),
        break_long_words=False,
        break_on_hyphens=False,
    ) or [line]
