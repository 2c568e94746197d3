"""`accelhost snapshot`: record this host into one JSON file, to replay anywhere."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

from accelhost.cli import options
from accelhost.cli.common import add_command, dumps_json
from accelhost.errors import AccelhostError

HELP = "record this host into one JSON file"
DESCRIPTION = (
    "Record what the planner and the doctor read on this host (commands, "
    "files, directories, environment) into one JSON file. Replay it with --snapshot on "
    "any read-only command, on any machine."
)


def run_snapshot(args: argparse.Namespace) -> int:
    from accelhost.host.live import LiveHost
    from accelhost.recording import record_snapshot

    data = record_snapshot(LiveHost(), args.device_type, doctor=not args.plan_only)
    text = dumps_json(data) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return 0
    directory = os.path.dirname(os.path.abspath(args.output))
    try:
        # Write whole or not at all: a half-written snapshot would mislead a bug report.
        fd, tmp = tempfile.mkstemp(prefix=".snapshot-", dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, args.output)
    except OSError as exc:
        raise AccelhostError(f"cannot write {args.output}: {exc.strerror}") from None
    size = len(text.encode())
    commands = len(json.loads(text).get("commands", {}))
    print(
        f"recorded {args.output} ({size / 1024:.1f} KiB, {commands} commands); "
        f"replay with --snapshot {args.output}",
        file=sys.stderr,
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = add_command(sub, "snapshot", run_snapshot, HELP, DESCRIPTION)
    parser.add_argument("-o", "--output", metavar="FILE", help="where to write (default: stdout)")
    options.device_type(parser)
    parser.add_argument(
        "--plan-only", action="store_true", help="record only what the planner reads"
    )
