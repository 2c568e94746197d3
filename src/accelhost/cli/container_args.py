"""The container options of doctor, clean and watch (and `--cri-socket` of snapshot):
which runtime sockets to ask, where the kubelet keeps pods' volumes, and which one
container to look at."""

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
    cri_socket(p)
    kubelet_root(p)
    p.add_argument(
        "--container",
        metavar="NAME|ID",
        help="only what this container runs or left behind (a name, a pod "
        "`namespace/name`, or an id prefix); naming none, or several of no one pod, is "
        "exit 2 with those it could mean "
        "(watch: in its first round; a container that goes later stays its scope)",
    )


def cri_socket(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cri-socket",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="ask the CRI runtime (Kubernetes' gRPC API) on this unix socket for pods and "
        "containers, PATH or unix://PATH (repeatable; after CONTAINER_RUNTIME_ENDPOINT, "
        "before containerd's, CRI-O's and cri-dockerd's usual sockets; one second each at "
        "most)",
    )


def kubelet_root(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kubelet-root",
        metavar="DIR",
        help="the kubelet's --root-dir, under which pods' emptyDir volumes are mounted "
        "(default /var/lib/kubelet, unsaid where absent; in a DaemonSet, where its "
        "hostPath is mounted)",
    )
