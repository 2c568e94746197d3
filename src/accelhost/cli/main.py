"""`accelhost` entry point: a thin dispatcher over one module per command.

`accelhost --help` (and no command, or an unknown one) needs only the commands' names and
help lines, which are here; a command's own parser is built, by its module's
`build_<command>(parser)`, only when that command is run, so `accelhost plan` does not pay
for the pipeline or the supervisor, nor `accelhost --help` for any of them. A builder sets
the handler (`func`): it takes the parsed arguments and returns the exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO, cast

from accelhost.errors import AccelhostError, ForeignPlanError, PlanError, UsageError

# command -> its line in `accelhost --help`, and the module of `accelhost.cli` building it
COMMANDS: dict[str, tuple[str, str]] = {
    "topo": ("CPUs, NUMA nodes, allowed CPUs and accelerators of this host", "topo"),
    "plan": ("the CPU plan of every visible accelerator", "plan"),
    "snapshot": ("record this host into one JSON file", "snapshot"),
    "bind": ("bind a running worker to its device's CPUs, memory node and IRQs", "bind"),
    "exec": ("start a command already bound to a device's CPUs and NUMA node", "bind"),
    "verify": ("check that a worker's threads and the device IRQs still match the plan", "bind"),
    "unbind": ("restore IRQ masks saved at bind time, or free a process's threads", "bind"),
    "doctor": ("what is wrong on this host, the evidence, the fix", "hygiene"),
    "clean": ("remove orphan engines and leaked shared memory (dry run unless --yes)", "hygiene"),
    "watch": ("run the checks every --interval and serve Prometheus metrics", "hygiene"),
    "run": ("supervise an engine so that nothing of it outlives it", "run"),
    "bench": ("measure how well the host feeds a device", "bench"),
}

DESCRIPTION = (
    "Host-side toolkit for accelerator inference servers: place workers on the right CPUs, "
    "keep hosts clean, feed devices."
)


class ArgumentsRefused(SystemExit):
    """argparse's refusal of a command line, after its one line went to standard error:
    still the SystemExit(2) argparse raises, carrying the reason for a `--json` document."""

    def __init__(self, reason: str) -> None:
        super().__init__(2)
        self.reason = reason


class HelpFormatter(argparse.HelpFormatter):
    """argparse's own wrapping to the terminal ($COLUMNS), with two additions: a blank line
    in a description or epilog starts a new paragraph, and an option whose choices would
    make one long word (`--check {orphan_engines,...}`, 160 columns) shows a short
    metavar, its choices listed in its help where they wrap."""

    LONGEST_CHOICES = 24  # a "{a,b,c}" longer than this is listed in the help instead

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text
        return "\n\n".join(fill(part, width, indent) for part in text.split("\n\n"))

    def _listed(self, action: argparse.Action) -> bool:
        return (
            action.metavar is None
            and action.choices is not None
            and bool(action.option_strings)
            and len(",".join(map(str, action.choices))) > self.LONGEST_CHOICES
        )

    def _metavar_formatter(self, action: argparse.Action, default_metavar: str) -> Any:
        if self._listed(action):
            return lambda size: (default_metavar,) * size
        return super()._metavar_formatter(action, default_metavar)

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action)
        if text is not None and self._listed(action) and "%(choices)" not in text:
            names = ", ".join(map(str, action.choices or ()))
            text += f"; {action.dest.upper()} is one of: {names}"
        return text


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: `accelhost CMD: error: WHAT; see accelhost CMD
    --help`. The usage block argparse prints first (6 to 11 lines for bind or run) hid
    the one line that matters; --help still shows it all. Sub-commands inherit the class
    (add_subparsers makes its parsers of the parent's type), and so its other default:

    No abbreviations anywhere: `plan --device 3` must not silently mean `--devices`, and a
    flag added later must not turn a user's working abbreviation into "ambiguous option"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self._print_message(f"{self.prog}: error: {message}; see {self.prog} --help\n", sys.stderr)
        raise ArgumentsRefused(message)


def build_parser(only: str | None = None, *, full: bool = True) -> argparse.ArgumentParser:
    """`accelhost`'s parser: every command's name and help line, and the whole parser of
    `only`, or with no `only` of every command (`full`) or of none (for the top-level help,
    which so imports no command module)."""
    from accelhost import __version__

    parser = Parser(prog="accelhost", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"accelhost {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (line, module) in COMMANDS.items():
        command = sub.add_parser(name, help=line)
        if name == only or (only is None and full):
            getattr(importlib.import_module(f"accelhost.cli.{module}"), f"build_{name}")(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its status is the exit status, whatever became of its output."""
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = guard(out), guard(err)
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = out, err


class ReaderGoneGuard:
    """One text stream (everything but `write` and `flush` is the stream's own) whose reader
    going away ends the output, never the command.

    `accelhost doctor | head` closes the pipe after ten lines; Python then raises
    BrokenPipeError from whatever `print` was running, deep inside the command, and the
    verdict the command was about to return was lost (the pipeline exited 0 on a FAIL). Here
    the first EPIPE points the stream's descriptor at /dev/null, so the rest of the output,
    and the flush at exit, go nowhere quietly, and the command finishes and returns its own
    status.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.reader_gone = False

    def write(self, text: str) -> int:
        if not self.reader_gone:
            try:
                return self.stream.write(text)
            except BrokenPipeError:
                self._discard()
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._discard()
        except (OSError, ValueError):
            if not self.reader_gone:
                raise

    def _discard(self) -> None:
        """From now on the descriptor is /dev/null: what is still buffered is dropped
        there, and a command started later (exec, run) inherits no dead pipe."""
        self.reader_gone = True
        try:
            fd = self.stream.fileno()
            with open(os.devnull, "w") as null:
                os.dup2(null.fileno(), fd)
        except (OSError, ValueError, io.UnsupportedOperation):
            return
        with contextlib.suppress(OSError, ValueError):
            self.stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def guard(stream: TextIO) -> TextIO:
    """`stream` behind a `ReaderGoneGuard` (once: a guard is not wrapped again)."""
    if isinstance(stream, ReaderGoneGuard):
        return stream
    return cast(TextIO, ReaderGoneGuard(stream))


def _main(args_list: list[str]) -> int:
    named = _named(args_list)
    first = named.partition(" ")[0]
    try:
        parser = build_parser(first if first in COMMANDS else None, full=False)
        args, extra = parser.parse_known_args(args_list)
        if extra:  # said by the command that was given them, not by `accelhost`
            Parser(prog=f"accelhost {named}".rstrip()).error(
                f"unrecognized arguments: {' '.join(extra)}"
            )
    except ArgumentsRefused as exc:
        before_dashes = args_list[: args_list.index("--")] if "--" in args_list else args_list
        _json_failure("--json" in before_dashes, named, 2, exc.reason)
        raise  # argparse's SystemExit(2), as callers of main() have always seen it
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    json = bool(getattr(args, "json", False))
    try:
        return int(func(args) or 0)
    except UsageError as exc:
        # the same status argparse gives its own usage errors
        return _failed(json, named, 2, f"accelhost {args.command}: {exc}", str(exc))
    except PlanError as exc:
        return _failed(json, named, 1, f"accelhost: cannot plan: {exc.reason}", exc.reason)
    except ForeignPlanError as exc:
        # the library's words list every difference and name allow_foreign=True
        line = exc.short("--force applies it anyway")
        return _failed(json, named, 1, f"accelhost: {line}", line)
    except AccelhostError as exc:
        return _failed(json, named, 1, f"accelhost: {exc}", str(exc))
    except KeyboardInterrupt:
        print("accelhost: interrupted", file=sys.stderr)
        return 130


def _failed(json: bool, command: str, status: int, line: str, reason: str) -> int:
    """One line on standard error; with --json also the command's document on standard
    output, so that `accelhost plan --json > plan.json` never leaves an empty file."""
    print(line, file=sys.stderr)
    _json_failure(json, command, status, reason)
    return status


def _json_failure(wanted: bool, command: str, status: int, reason: str) -> None:
    from accelhost import formats

    name = formats.PRINTED.get(command)
    if wanted and name is not None:
        from accelhost.cli.common import print_json

        print_json({"format": name, "exit_code": status, "reason": reason})


def _named(args_list: list[str]) -> str:
    """The command (`plan`, `bench pipeline`) a command line names, as its document is
    named: no top-level option takes a value, so it is the first word or two."""
    words = [a for a in args_list if not a.startswith("-")][:2]
    return " ".join(words if words[:1] == ["bench"] else words[:1])


if __name__ == "__main__":
    sys.exit(main())
