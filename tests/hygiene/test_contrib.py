"""The shipped systemd unit and DaemonSet: what the docs promise, and arguments that parse."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from accelhost.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]


def _parses(argv: list[str]) -> None:
    args = build_parser("watch").parse_args(argv)
    assert args.command == "watch"


def test_daemonset_sees_the_host_and_creates_nothing_there() -> None:
    yaml = pytest.importorskip("yaml")
    doc: dict[str, Any] = yaml.safe_load((ROOT / "contrib/k8s/daemonset.yaml").read_text())
    spec = doc["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["hostIPC"] is True
    (container,) = spec["containers"]
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
