"""The container options of doctor, clean and watch: which runtime sockets to ask, and
which one container to look at."""

from __future__ import annotations

import argparse


def add_container_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--docker-socket",
        action="append",
        default=[],
        metavar="PATH",
        help="ask the Docker (or Podman) API on this unix socket first for container names "
        "(repeatable; then DOCKER_HOST=unix://..., /var/run/docker.sock, "
        "/run/podman/podman.sock; one second each at most)",
    )
    p.add_argument(
        "--container",
        metavar="NAME|ID",
        help="only what this container runs or left behind (a name, a pod "
        "`namespace/name`, or an id prefix); naming none, or several of no one pod, is "
        "exit 2 with those it could mean "
        "(watch: in its first round; a container that goes later stays its scope)",
    )
