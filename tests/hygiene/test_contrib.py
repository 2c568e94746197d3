"""The shipped systemd unit and DaemonSet: what the docs promise, and arguments that parse."""

from __future__ import annotations

import argparse
import posixpath
import shlex
from pathlib import Path
from typing import Any

import yaml  # a test dependency (pyproject's `test` extra), never the product's

from accelhost.cli.main import build_parser
from accelhost.containers.reader import CRI_SOCKETS
from accelhost.hygiene.capabilities import READ_CAPS

ROOT = Path(__file__).resolve().parents[2]


# The kubelet's first back-off before restarting a crashed container (then 20, 40 ... 300 s)
KUBELET_FIRST_BACKOFF_S = 10.0


def _parses(argv: list[str]) -> argparse.Namespace:
    args = build_parser("watch").parse_args(argv)
    assert args.command == "watch"
    return args


def _daemonset() -> tuple[dict[str, Any], dict[str, Any]]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "contrib/k8s/daemonset.yaml").read_text())
    spec = doc["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    return spec, container


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def test_daemonset_sees_the_host_and_creates_nothing_there() -> None:
    spec, container = _daemonset()
    assert spec["hostPID"] is True and spec["hostIPC"] is True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/sys"]["readOnly"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    for name, host_path in volumes.items():
        # only the journal directory may be created on the host
        if host_path["path"] != "/var/log/accelhost":
            assert not str(host_path.get("type", "")).endswith("OrCreate"), name
    _parses(container["command"][1:] + container["args"])


def test_systemd_unit_runs_a_valid_watch() -> None:
    unit = (ROOT / "contrib/systemd/accelhost-watch.service").read_text()
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    assert argv[0].endswith("/accelhost") and argv[1] == "watch"
    _parses(argv[1:])


def test_daemonset_mounts_what_its_options_name() -> None:
    """The CRI socket it asks and the kubelet root it names are where the host's are, seen
    through hostPath mounts at the same paths and with HostToContainer, so that sockets
    made anew and emptyDirs mounted after the watcher started are seen."""
    spec, container = _daemonset()
    args = _parses(container["command"][1:] + container["args"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    host_paths = {v["name"]: v["hostPath"] for v in spec["volumes"]}
    (endpoint,) = args.cri_socket
    socket = endpoint.removeprefix("unix://")
    assert socket in CRI_SOCKETS  # a runtime's usual socket, named so that its absence is said
    # the runtime's directory, not the socket file (a bind of a file goes stale on restart)
    (runtime,) = [n for n, m in mounts.items() if _under(socket, m["mountPath"])]
    assert mounts[runtime]["mountPath"] == posixpath.dirname(socket)
    assert host_paths[runtime] == {"path": posixpath.dirname(socket), "type": "Directory"}
    pods = posixpath.join(args.kubelet_root, "pods")
    (kubelet,) = [n for n, m in mounts.items() if m["mountPath"] == pods]
    assert host_paths[kubelet] == {"path": pods, "type": "Directory"}
    for name in (runtime, kubelet):
        assert mounts[name]["mountPropagation"] == "HostToContainer", name
        # read-only binds: an emptyDir tmpfs under one keeps its own (rw) flags
        assert mounts[name]["readOnly"] is True, name
        assert "recursiveReadOnly" not in mounts[name], name


def test_daemonset_ends_crash_loops_with_what_it_is_granted() -> None:
    """--auto-clean is on, so the host's /dev/shm is writable; a crash is seen at the next
    round (no process events without CAP_NET_ADMIN) and its files go once unchanged for
    --shm-min-age: both within half the kubelet's first back-off, so the next attempt
    starts clean. It still holds only the read capabilities, AppArmor unconfined."""
    spec, container = _daemonset()
    args = _parses(container["command"][1:] + container["args"])
    assert args.auto_clean is True
    (shm,) = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/shm"]
    assert shm["readOnly"] is False
    assert max(args.interval, args.shm_min_age) <= KUBELET_FIRST_BACKOFF_S / 2
    ctx = container["securityContext"]
    assert ctx["capabilities"]["drop"] == ["ALL"]
    assert {f"CAP_{c}" for c in ctx["capabilities"]["add"]} == set(READ_CAPS)
    assert ctx["appArmorProfile"] == {"type": "Unconfined"}
    assert ctx["privileged"] is False and ctx["readOnlyRootFilesystem"] is True
    assert "hostNetwork" not in spec


def test_systemd_recipe_uses_a_venv_the_unit_can_see() -> None:
    """Debian 12 refuses pip into the system's Python (PEP 668): the unit runs accelhost
    from a virtual environment under /opt, which ProtectHome does not hide."""
    unit = (ROOT / "contrib/systemd/accelhost-watch.service").read_text()
    (exec_start,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    binary = shlex.split(exec_start.removeprefix("ExecStart="))[0]
    venv = posixpath.dirname(posixpath.dirname(binary))
    assert _under(binary, "/opt") and not _under(binary, "/home") and not _under(binary, "/root")
    assert "ProtectHome=yes" in unit
    for text in (
        unit,
        (ROOT / "contrib/README.md").read_text(),
        (ROOT / "docs/hygiene.md").read_text(),
    ):
        assert f"python3 -m venv {venv} && {venv}/bin/pip install" in text
