"""`accelhost snapshot`: record this host into one JSON file, to replay anywhere."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from accelhost.cli import options
from accelhost.cli.common import command, dumps_json, pci_from_args
from accelhost.errors import AccelhostError
from accelhost.host.base import Host


def record_snapshot(
    inner: Host,
    device_type: str | None = None,
    doctor: bool = True,
    pci: Sequence[str] | None = None,
    cri_sockets: Sequence[str] = (),
    kubelet_root: str | None = None,
) -> dict[str, Any]:
    """Read `inner` as `plan`/`topo` (and `doctor`) would, and return the snapshot dict.

    Trimmed like every recording (`accelhost.host.redact`); of `ps -Te` only the UVB poll
    threads the Ascend planner looks for are kept, of a container runtime's answers only
    the fields the doctor reads. `pci` records those devices' sysfs, which only
    `--pci` names: a replay then plans them with the same `--pci`. `cri_sockets` and
    `kubelet_root`: as the doctor's `--cri-socket` and `--kubelet-root` (a replay that
    names the same finds the same answers)."""
    from accelhost.containers.docker_api import trim_answer
    from accelhost.containers.pod_volumes import read_pod_mounts
    from accelhost.host.base import command_key
    from accelhost.host.once import read_once
    from accelhost.host.redact import recorder
    from accelhost.hygiene import HygieneOptions, read_facts
    from accelhost.parsers.ps import keep_thread_lines
    from accelhost.readers.topology import PS_THREADS, read_topology

    rec = recorder(inner, {command_key(PS_THREADS): keep_thread_lines}, http_filter=trim_answer)
    once = read_once(rec)  # what the planner and the doctor both read is read once
    topo = read_topology(once, device_type=device_type, pci=pci)
    if doctor:
        read_facts(once, HygieneOptions(cri_sockets=tuple(cri_sockets), kubelet_root=kubelet_root))
        read_pod_mounts(once, kubelet_root)
    return rec.to_snapshot(device_type=topo.family, pci=pci)


DESCRIPTION = (
    "Record what the planner and the doctor read on this host (commands, "
    "files, directories, environment) into one JSON file. Replay it with --snapshot on "
    "any read-only command, on any machine."
)


def run_snapshot(args: argparse.Namespace) -> int:
    from accelhost.host import live_host

    pci = pci_from_args(args)
    data = record_snapshot(
        live_host(),
        args.device_type,
        not args.plan_only,
        pci,
        cri_sockets=args.cri_socket,
        kubelet_root=args.kubelet_root,
    )
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
    print(
        f"recorded {args.output} ({len(text.encode()) / 1024:.1f} KiB, "
        f"{len(data.get('commands', {}))} commands); replay with --snapshot {args.output}",
        file=sys.stderr,
    )
    return 0


def build_snapshot(parser: argparse.ArgumentParser) -> None:
    command(parser, run_snapshot, DESCRIPTION)
    parser.add_argument("-o", "--output", metavar="FILE", help="where to write (default: stdout)")
    options.device_type(parser)
    options.pci(parser)
    parser.add_argument(
        "--plan-only", action="store_true", help="record only what the planner reads"
    )
    options.cri_socket(parser)
    options.kubelet_root(parser)
