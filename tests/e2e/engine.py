"""Start real vLLM servers (the CPU build) for the scenarios, and never lose track of them.

`start_server(...)` returns at once with a `Server`; `Server.wait_ready()` waits until it
answers. Starting several before waiting on any lets them warm up in parallel. Every
process of a server's tree is recorded by (pid, start time) whenever the tree is looked at,
so `Server.stop()` (always called from a fixture's finally) kills exactly what the test
started, including children re-parented away after their parent died, and removes the
/dev/shm files the server held that are still there and held by nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from procs import SHM_DIR, Tracked, cmdline, descendants, shm_files_held, wait_for

READY_TIMEOUT_S = float(os.environ.get("E2E_READY_TIMEOUT", "900"))

# What every server gets: vLLM's CPU build with a small KV cache, nothing from the network.
# "nobind": vLLM's own binding ("auto") pins each server's worker to CPU 0 on this 2-core
# machine, so servers warming together share one CPU while the other idles (three at once:
# 118 s until all answered, 86 s with "nobind"). The servers whose test is about where
# vLLM puts its threads set it themselves (conftest: "healthy"; plugin_plans).
BASE_ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}

# How a server is launched, as users do it:
# - "direct": `python -m vllm.entrypoints.openai.api_server ...` in a session of its own;
# - "script": a deployment script `sh -c 'nohup python -m ... &'` that exits at once, leaving
#   the server in the script's process group whose leader is gone;
# - "run": under `accelhost run RUN_ARGS -- python -m ...`.
LAUNCHERS = ("direct", "script", "run")


def free_port() -> int:
    """A free loopback port (the kernel's pick), one per server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def accelhost_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "accelhost", *args]


def vllm_argv(model: Path, port: int, extra: Sequence[str] = ()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--max-model-len",
        "256",
        "--dtype",
        "float32",
        # No torch.compile: on this 2-core machine the warm-up's Dynamo trace took 20 to
        # 40 s of CPU per start (of some 60), some 25 starts a run. Nothing accelhost
        # looks at changes: the same three processes, the same /dev/shm files.
        "--enforce-eager",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *extra,
    ]


@dataclass
class Server:
    name: str
    model: Path
    port: int
    launcher: str
    log: Path
    popen: subprocess.Popen[bytes]
    tracked: Tracked = field(default_factory=Tracked)
    api_pid: int | None = None
    shm_files: set[str] = field(default_factory=set)  # every file its tree was seen holding
    shm_before: set[str] = field(default_factory=set)  # /dev/shm names before its start

    # -- the tree ---------------------------------------------------------------------
    def roots(self) -> list[int]:
        roots = [self.popen.pid]
        if self.api_pid is not None:
            roots.append(self.api_pid)
        return roots

    def refresh(self) -> set[int]:
        """Record the tree as it is now; return its live pids (recorded ones included)."""
        if self.api_pid is None:
            self.api_pid = self._find_api_pid()
        self.tracked.add(descendants(self.roots()))
        alive = self.tracked.alive()
        self.shm_files |= shm_files_held(alive)
        return alive

    def _find_api_pid(self) -> int | None:
        if self.launcher == "script":
            pidfile = self.log.with_suffix(".pid")
            text = pidfile.read_text().strip() if pidfile.exists() else ""
            return int(text) if text.isdigit() else None
        if self.launcher == "direct":
            return self.popen.pid
        for pid in descendants([self.popen.pid]):  # run: the supervisor's child
            if "vllm.entrypoints" in cmdline(pid) and pid != self.popen.pid:
                return pid
        return None

    def pids(self) -> set[int]:
        """The live processes of this server (the supervisor of "run" excluded)."""
        return self.refresh() - ({self.popen.pid} if self.launcher == "run" else set())

    @property
    def own_files(self) -> set[str]:
        """The /dev/shm files this server made: new since its start and held by its tree
        (by name or by inode: its semaphore, see `procs.shm_files_held`) when it was seen."""
        return {f for f in self.shm_files if os.path.basename(f) not in self.shm_before}

    def pid_of(self, title: str) -> int:
        """The one live process of the tree whose command line starts with `title`."""
        found = [p for p in self.refresh() if cmdline(p).startswith(title)]
        assert len(found) == 1, f"{self.name}: {title} processes: {found}\n{self.log_tail()}"
        return found[0]

    # -- life -------------------------------------------------------------------------
    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> Server:
        def ready() -> bool:
            self.refresh()
            if self.launcher != "script" and self.popen.poll() is not None:
                raise AssertionError(
                    f"{self.name} exited with {self.popen.returncode} before it answered\n"
                    f"{self.log_tail()}"
                )
            if self.api_pid is not None and not self.tracked.is_alive(self.api_pid):
                raise AssertionError(f"{self.name} died before it answered\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url("/v1/models"), timeout=5) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_for(f"{self.name} to answer on port {self.port}", ready, timeout, every=1.0)
        # The engine maps its message queues while it warms up: wait until they are seen.
        wait_for(f"{self.name}'s /dev/shm files", lambda: self.refresh() and self.shm_files, 60)
        return self

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def complete(self, prompt: str = "hello world", max_tokens: int = 4) -> dict[str, object]:
        """One completion request, as a user checks that a server works."""
        body = json.dumps({"model": str(self.model), "prompt": prompt, "max_tokens": max_tokens})
        req = urllib.request.Request(
            self.url("/v1/completions"),
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            answer: dict[str, object] = json.load(resp)
        return answer

    def answers(self) -> bool:
        answer = self.complete()
        choices = answer.get("choices")
        usage = answer.get("usage")
        return (
            isinstance(choices, list)
            and len(choices) == 1
            and isinstance(usage, dict)
            and usage.get("completion_tokens") == 4
        )

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        kept = [ln for ln in self.log_text().splitlines() if "leaked " not in ln]
        return "\n".join(kept[-lines:])

    def terminate(self) -> None:
        """Ask a server that still serves to stop as users do: SIGTERM to its API server.

        vLLM's own shutdown then unlinks its files (its resource tracker does); SIGKILL
        alone would leave them in /dev/shm (`stop` removes those it saw held).
        """
        with contextlib.suppress(Exception):
            self.refresh()
            if self.api_pid is not None and self.tracked.is_alive(self.api_pid):
                self.tracked.signal({self.api_pid}, signal.SIGTERM)

    def stop(self, grace: float = 0.0) -> None:
        """Kill what is left of this server's tree and remove the files it left (finally).

        With `grace` (after `terminate()`), first wait that long for the tree to end itself.
        """
        with contextlib.suppress(Exception):
            self.refresh()
        if grace > 0:
            with contextlib.suppress(AssertionError):
                wait_for(f"{self.name} to stop", lambda: not self.tracked.alive(), grace)
        self.tracked.kill_all()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=30)
        with contextlib.suppress(AssertionError):
            wait_for(f"{self.name} to die", lambda: not self.tracked.alive(), 30)
        held_by_anyone = shm_files_held(int(p) for p in os.listdir("/proc") if p.isdigit())
        for path in sorted(self.own_files - held_by_anyone):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def start_server(
    name: str,
    model: Path,
    workdir: Path,
    *,
    launcher: str = "direct",
    env: Mapping[str, str] | None = None,
    run_args: Sequence[str] = (),
    vllm_args: Sequence[str] = (),
) -> Server:
    """Start one vLLM server and return at once (call `wait_ready()` before using it).

    `env` is added to the suite's environment (e.g. `{"ACCELHOST_PLAN": str(plan)}`);
    `run_args` go to `accelhost run` before `--` when `launcher="run"`.
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher {launcher!r} is not one of {LAUNCHERS}")
    port = free_port()
    log = workdir / f"{name}.log"
    full_env = {**os.environ, **BASE_ENV, **(env or {})}
    argv = vllm_argv(model, port, vllm_args)
    shm_before = set(os.listdir(SHM_DIR))
    with open(log, "wb") as out:
        if launcher == "script":
            pidfile = log.with_suffix(".pid")
            script = (
                f"nohup {shlex.join(argv)} >{shlex.quote(str(log))} 2>&1 </dev/null & "
                f"echo $! >{shlex.quote(str(pidfile))}"
            )
            popen = subprocess.Popen(["sh", "-c", script], env=full_env, start_new_session=True)
            popen.wait(timeout=30)  # the script exits at once, as deployment scripts do
            wait_for(f"{name}'s pid file", pidfile.exists, 30)
        else:
            if launcher == "run":
                argv = accelhost_argv("run", *run_args, "--", *argv)
            popen = subprocess.Popen(
                argv, env=full_env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
    server = Server(name, model, port, launcher, log, popen, shm_before=shm_before)
    server.refresh()
    return server


def wait_gone(server: Server, timeout: float = 120) -> None:
    """Wait until every recorded process of the server is gone (reaped or not ours)."""
    wait_for(f"{server.name}'s processes to go", lambda: not server.tracked.alive(), timeout)


def sigkill(server: Server, pids: set[int]) -> None:
    server.tracked.signal(pids, signal.SIGKILL)


def now() -> float:
    return time.monotonic()
