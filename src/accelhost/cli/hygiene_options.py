"""The options doctor, clean and watch share, and how they become `HygieneOptions`.

Every bad value is a UsageError (exit 2): for the doctor, 1 means "a problem on the node",
and a typo must never page anyone.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from accelhost.cli import options
from accelhost.cli.common import host_from_args
from accelhost.errors import SnapshotError, UsageError
from accelhost.host.base import Host
from accelhost.hygiene.engines import Engine, build_catalog, parse_catalog_file
from accelhost.hygiene.options import DEFAULT_SHM_DIRS, DEFAULT_SHM_MIN_AGE_S, HygieneOptions


def add_common(p: argparse.ArgumentParser) -> None:
    """What doctor, clean and watch all take: the host, the engine catalog, shared memory,
    the containers (the runtime sockets to ask, the kubelet's root, the one to look at)."""
    options.snapshot(p)
    options.device_glob(p)
    p.add_argument(
        "--engine-child",
        action="append",
        default=[],
        metavar="REGEX",
        help="also treat processes whose command line matches REGEX as engine children: "
        "orphans when no engine frontend is above them (repeatable; adds to the catalog)",
    )
    p.add_argument(
        "--engine-frontend",
        action="append",
        default=[],
        metavar="REGEX",
        help="also treat command lines matching REGEX as engine frontends (never orphans; "
        "children under them are healthy)",
    )
    p.add_argument(
        "--engine-catalog",
        metavar="FILE",
        help='add engines from a JSON file: {"engines": [{"name": ..., "frontends": [...], '
        '"children": [...], "shm_names": [...]}]} (see docs/hygiene.md)',
    )
    p.add_argument(
        "--shm-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="also look for leaked POSIX shared memory in this tmpfs dir (repeatable; "
        f"adds to {', '.join(DEFAULT_SHM_DIRS)})",
    )
    p.add_argument(
        "--shm-name",
        action="append",
        default=[],
        metavar="GLOB",
        help="also count unheld shared-memory files named GLOB as leaked (repeatable; adds "
        "to the catalog's psm_*, sem.mp-*, vllm_offload_*.mmap, nccl-*, torch_*)",
    )
    p.add_argument(
        "--shm-min-age",
        dest="shm_min_age",
        type=float,
        default=DEFAULT_SHM_MIN_AGE_S,
        metavar="SECONDS",
        help="a SysV segment must be idle, a /dev/shm file unchanged, this long to count "
        "as leaked (default 60)",
    )
    p.add_argument(
        "--idle-baseline-mib",
        type=int,
        metavar="MIB",
        help="device memory an idle device may report as used "
        "(default 4096 on Ascend, 1024 on NVIDIA)",
    )
    p.add_argument(
        "--hugepages-threshold",
        type=float,
        default=0.90,
        metavar="FRACTION",
        help="WARN when a HugePages pool is used above this (default 0.90)",
    )
    p.add_argument(
        "--docker-socket",
        action="append",
        default=[],
        metavar="PATH",
        help="ask the Docker (or Podman) API on this unix socket first for container names "
        "(repeatable; then DOCKER_HOST=unix://..., /var/run/docker.sock, "
        "/run/podman/podman.sock; one second each at most)",
    )
    options.cri_socket(p)
    options.kubelet_root(p)
    p.add_argument(
        "--container",
        metavar="NAME|ID",
        help="only what this container runs or left behind (a name, a pod `namespace/name`, or an "
        "id prefix); naming none, or several of no one pod, is exit 2 with those it could mean "
        "(watch: in its first round; a container that goes later stays its scope)",
    )


def add_preflight(p: argparse.ArgumentParser) -> None:
    options.expect_util(p, "preflight")
    options.device(p, "preflight only these devices")


def _catalog_words(args: argparse.Namespace) -> tuple[str, ...]:
    """The options that built the catalog, as typed: a fix repeats them."""
    words = ["--engine-catalog", args.engine_catalog] if args.engine_catalog else []
    for flag in ("--engine-child", "--engine-frontend", "--shm-name"):
        for value in getattr(args, flag[2:].replace("-", "_")):
            words += [flag, value]
    return tuple(words)


def hygiene_options(args: argparse.Namespace) -> HygieneOptions:
    devices = getattr(args, "device", None)
    if devices is not None and getattr(args, "expect_util", None) is None:
        raise UsageError("--device goes with --expect-util U (the preflight)")
    for d in args.shm_dir:
        if not args.snapshot and not os.path.isdir(d):
            raise UsageError(f"--shm-dir {d}: not a directory")
    engines: list[Engine] = []
    if path := args.engine_catalog:
        try:
            engines = parse_catalog_file(Path(path).read_text(encoding="utf-8"), path)
        except OSError as exc:
            raise UsageError(f"--engine-catalog {path}: {exc.strerror}") from None
    catalog = build_catalog(
        engines, frontends=args.engine_frontend, children=args.engine_child, shm_names=args.shm_name
    )
    dirs = tuple(dict.fromkeys([*DEFAULT_SHM_DIRS, *(d.rstrip("/") or "/" for d in args.shm_dir)]))
    return HygieneOptions(
        device_globs=tuple(args.device_glob),
        shm_min_age_s=args.shm_min_age,
        expect_util=getattr(args, "expect_util", None),
        devices=tuple(devices or ()),
        idle_baseline_mib=args.idle_baseline_mib,
        hugepages_threshold=args.hugepages_threshold,
        catalog=catalog,
        catalog_words=_catalog_words(args),
        shm_dirs=dirs,
        container_sockets=tuple(args.docker_socket),
        cri_sockets=tuple(args.cri_socket),
        kubelet_root=args.kubelet_root,
        container=args.container,
    )


def hygiene_host(args: argparse.Namespace) -> Host:
    """The host to read; a snapshot that cannot be read is the caller's input: exit 2."""
    try:
        return host_from_args(args)
    except SnapshotError as exc:
        raise UsageError(str(exc)) from None
