"""Helpers of the bench bind tests (a unique module name: every test dir has a conftest)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest


def run_bench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`accelhost bench bind ARGS` as a real process, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "accelhost", "bench", "bind", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def bench_json(*args: str) -> dict:
    res = run_bench("--json", *args)
    assert res.returncode in (0, 1), res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def plan_file(tmp_path: Path) -> Callable[[dict[str, object]], str]:
    def write(data: dict[str, object]) -> str:
        path = tmp_path / "plan.json"
        path.write_text(json.dumps(data))
        return str(path)

    return write
