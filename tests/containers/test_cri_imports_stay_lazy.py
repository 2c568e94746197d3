"""grpcio and protobuf are declared, but only a CRI look loads them: `--version`, `plan`
and `bind --help` run on hosts without Kubernetes and must not pay their import time.

`-X importtime` lists every module the interpreter imported, wherever the import stood,
so a function-level import that a command happens to reach is caught too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
HEAVY = ("grpc", "google.protobuf", "accelhost.host.cri_api.client")


def _imported(*argv: str) -> set[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "accelhost", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert "accelhost" in names, "no import-time lines: the check would see nothing"
    return names


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["plan", "--snapshot", "example:a3-640cpu-16npu"],
        ["bind", "--help"],
    ],
)
def test_commands_without_a_cri_look_never_import_grpc_or_protobuf(argv: list[str]) -> None:
    names = _imported(*argv)
    loaded = sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))
    assert not loaded, f"accelhost {' '.join(argv)} imported {loaded}"


def test_the_check_sees_grpc_when_it_is_imported() -> None:
    """The same reading of -X importtime does find grpc where it is loaded."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import accelhost.host.cri_api.client"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    names = {ln.rsplit("|", 1)[1].strip() for ln in done.stderr.splitlines() if "|" in ln}
    assert "grpc" in names and "google.protobuf" in names
