"""The bundled real-engine recording: five vLLM CPU servers, one of whose API server was
SIGKILLed (recorded by the real-engine suite, tests/e2e). `doctor` replays the story on
any machine: exactly that server's EngineCore and Worker are orphans; the healthy
servers, one of them launched by a script that exited, are not."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from accelhost.host import load_snapshot

EXAMPLE = "example:vllm-cpu-orphaned-engine"
ENGINE, WORKER = 10182, 11021  # the killed API server's children


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost", "doctor", "--snapshot", EXAMPLE, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _engine_children() -> dict[int, str]:
    """Every VLLM:: process of the recording, from its recorded /proc."""
    host = load_snapshot(EXAMPLE)
    found = {}
    for name in host.list_dir("/proc") or []:
        text = host.read_file(f"/proc/{name}/cmdline") if name.isdigit() else None
        if text and text.startswith("VLLM::"):
            found[int(name)] = text.split("\0")[0]
    return found


def test_the_recording_holds_five_servers() -> None:
    titles = sorted(_engine_children().values())
    assert titles == ["VLLM::EngineCore"] * 5 + ["VLLM::Worker"] * 5


def test_doctor_names_exactly_the_orphans_with_their_parents() -> None:
    res = _doctor("--check", "orphan_engines", "--json")
    assert res.returncode == 1, res.stderr
    (check,) = json.loads(res.stdout)["checks"]
    assert check["status"] == "FAIL"
    evidence: dict[int, dict[str, Any]] = {e["pid"]: e for e in check["evidence"]}
    assert set(evidence) == {ENGINE, WORKER}
    assert set(_engine_children()) - set(evidence), "the healthy servers' engines are not named"
    assert evidence[ENGINE]["ppid"] == 1  # re-parented to PID 1 when its API server died
    assert evidence[WORKER]["ppid"] == ENGINE
    assert evidence[ENGINE]["cmdline"].startswith("VLLM::EngineCore")
    assert evidence[WORKER]["cmdline"].startswith("VLLM::Worker")


def test_table_tells_the_story() -> None:
    res = _doctor("--check", "orphan_engines")
    assert res.returncode == 1
    assert f"pid {ENGINE} VLLM::EngineCore" in res.stdout
    assert f"pid {WORKER} VLLM::Worker" in res.stdout
