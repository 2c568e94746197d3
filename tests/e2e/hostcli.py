"""The accelhost commands as a user runs them, with their `--json` answers read back."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from engine import accelhost_argv


@dataclass
class Answer:
    rc: int
    data: Any
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout[-4000:]}\nstderr:\n{self.stderr[-4000:]}"


def accelhost(*args: str, timeout: float = 600) -> Answer:
    done = subprocess.run(
        accelhost_argv(*args), capture_output=True, text=True, timeout=timeout, check=False
    )
    data = None
    if "--json" in args and done.stdout.strip():
        data = json.loads(done.stdout)
    return Answer(done.returncode, data, done.stdout, done.stderr)


def metrics(addr: str) -> dict[str, float]:
    """A watch's /metrics at `addr` (HOST:PORT): each sample's name with labels, its value."""
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            with contextlib.suppress(ValueError):
                values[name] = float(value)
    return values


def say_at_end(request: Any, text: str) -> None:
    """Print a run's figures in the session's output, also from a fixture's teardown and
    after a failure (a fixture's output is captured)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(text)


def walk(node: Any) -> Iterator[dict[str, Any]]:
    """Every dictionary inside a JSON answer, depth first."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from walk(value)


def check(report: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in report["checks"] if c["name"] == name]
    assert len(found) == 1, (
        f"doctor has no single {name} check: {[c['name'] for c in report['checks']]}"
    )
    return found[0]


def pids_named(node: Any) -> set[int]:
    """Pids that a JSON answer names as processes (evidence, targets, actions)."""
    pids: set[int] = set()
    for d in walk(node):
        if isinstance(d.get("pid"), int):
            pids.add(d["pid"])
        for key in ("pids",):
            if isinstance(d.get(key), list):
                pids.update(p for p in d[key] if isinstance(p, int))
    return pids


def paths_named(node: Any) -> set[str]:
    """/dev/shm paths that a JSON answer names."""
    return {d["path"] for d in walk(node) if isinstance(d.get("path"), str)}
