"""`accelhost` entry point: a thin dispatcher over one module per command.

Only the module of the command being run is imported, so `accelhost plan` does not pay for
the pipeline or the supervisor. Each module exposes `register(subparsers)`, which adds its
parser(s) with `set_defaults(func=handler)`; a handler takes the parsed arguments and
returns the exit status.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from accelhost.errors import AccelhostError, PlanError, UsageError

# command name -> module that registers it (one module may register several commands)
COMMANDS: dict[str, str] = {
    "topo": "accelhost.cli.topo",
    "plan": "accelhost.cli.plan",
    "snapshot": "accelhost.cli.snapshot",
    "bind": "accelhost.cli.bind",
    "exec": "accelhost.cli.bind",
    "verify": "accelhost.cli.bind",
    "unbind": "accelhost.cli.bind",
    "doctor": "accelhost.cli.hygiene",
    "clean": "accelhost.cli.hygiene",
    "watch": "accelhost.cli.hygiene",
    "run": "accelhost.cli.run",
    "bench": "accelhost.cli.bench",
}

DESCRIPTION = (
    "Host-side toolkit for accelerator inference servers: place workers on the right CPUs, "
    "keep hosts clean, feed devices."
)


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: `accelhost CMD: error: WHAT; see accelhost CMD
    --help`. The usage block argparse prints first (6 to 11 lines for bind or run) hid
    the one line that matters; --help still shows it all. Sub-commands inherit the class
    (add_subparsers makes its parsers of the parent's type), and so its other default:

    No abbreviations anywhere: `plan --device 3` must not silently mean `--devices`, and a
    flag added later must not turn a user's working abbreviation into "ambiguous option"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    from accelhost import __version__

    parser = Parser(prog="accelhost", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"accelhost {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[only]] if only in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args, extra = parser.parse_known_args(args_list)
    if extra:  # said by the command that was given them, not by `accelhost`
        words = [getattr(args, "command", None), getattr(args, "bench_command", None)]
        prog = " ".join(["accelhost", *(w for w in words if w)])
        Parser(prog=prog).error(f"unrecognized arguments: {' '.join(extra)}")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        status = func(args)
    except UsageError as exc:
        # the same status argparse gives its own usage errors
        print(f"accelhost {args.command}: {exc}", file=sys.stderr)
        return 2
    except PlanError as exc:
        print(f"accelhost: cannot plan: {exc.reason}", file=sys.stderr)
        return 1
    except AccelhostError as exc:
        print(f"accelhost: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("accelhost: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `accelhost plan | head`: the reader went away; say nothing more.
        sys.stderr.close()
        return 0
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
