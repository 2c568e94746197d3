"""Fixtures of the real-engine suite: one tiny model, and real vLLM servers started early.

Each test names the servers it uses with `@pytest.mark.servers("name", ...)`; the names
are keys of `SERVER_SPECS`. When the first test asks for a server, every server named by
any selected test is started at once, so their 40-60 s warm-ups overlap; each test then
waits only for its own. Every server is stopped (its whole recorded tree killed, its
leftover /dev/shm files removed) at the end of the session, whatever happened.

To add a scenario: add a spec here (launcher, environment, `accelhost run` options), mark
the test, and take the server with `server_pool.get("name")`. See docs/e2e.md.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from docker_daemon import Daemon, start_daemon  # noqa: E402
from engine import Server, start_server  # noqa: E402
from plugin_plans import absent_cpu, cpus, plugin_env  # noqa: E402
from tiny_model import build_tiny_model  # noqa: E402

# How long the session's end waits for a server's own graceful stop before SIGKILL.
STOP_GRACE_S = 30.0

EnvSpec = Mapping[str, str] | Callable[[Path], Mapping[str, str]]


@dataclass(frozen=True)
class ServerSpec:
    launcher: str = "direct"
    # Extra environment, or a function of the session's work directory that returns it
    # (to write a plan file first, for instance).
    env: EnvSpec = field(default_factory=dict)
    run_args: tuple[str, ...] = ()
    vllm_args: tuple[str, ...] = ()


SERVER_SPECS: dict[str, ServerSpec] = {
    # Started by a deployment script that exits: healthy, and must never be touched.
    # vLLM's own OpenMP binding, as users get it (every other server starts with "nobind":
    # engine.BASE_ENV), for the plugin's "does nothing" test to find where vLLM put it.
    "healthy": ServerSpec(launcher="script", env={"VLLM_CPU_OMP_THREADS_BIND": "auto"}),
    # Its API server is SIGKILLed: EngineCore and Worker are left as orphans.
    "victim_api": ServerSpec(),
    # Every process of it is SIGKILLed: its /dev/shm files are left.
    "victim_tree": ServerSpec(),
    # Under `accelhost run`, its engine is killed.
    "run_fail_on_exit": ServerSpec(
        launcher="run", run_args=("--fail-on-exit", "VLLM::EngineCore", "--grace", "10")
    ),
    # Under `accelhost run`, which is stopped with SIGTERM.
    "run_sigterm": ServerSpec(launcher="run", run_args=("--grace", "30")),
    # The vLLM plugin with a plan whose device 0 is one CPU, the one vLLM does not use.
    "plugin_bound": ServerSpec(
        env=lambda wd: plugin_env(wd, "plugin_bound", [cpus()[1]]),
    ),
    # The vLLM plugin with a plan whose device 0 is a CPU this host does not have.
    "plugin_bad_plan": ServerSpec(
        env=lambda wd: plugin_env(wd, "plugin_bad_plan", [absent_cpu()]),
    ),
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "servers(*names): real vLLM servers the test uses")


@pytest.fixture(scope="session")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def tiny_model(e2e_dir: Path) -> Path:
    return build_tiny_model(e2e_dir / "tiny-llama")


class ServerPool:
    """Servers by name, all started on first use; `get` waits until one answers."""

    def __init__(self, names: list[str], model: Path, workdir: Path) -> None:
        self.names = names
        self.model = model
        self.workdir = workdir
        self.started: dict[str, Server] = {}

    def start_all(self) -> None:
        for name in self.names:
            if name not in self.started:
                self.start(name)

    def start(self, name: str) -> Server:
        spec = SERVER_SPECS[name]
        env = spec.env(self.workdir) if callable(spec.env) else spec.env
        self.started[name] = start_server(
            name,
            self.model,
            self.workdir,
            launcher=spec.launcher,
            env=env,
            run_args=spec.run_args,
            vllm_args=spec.vllm_args,
        )
        return self.started[name]

    def get(self, name: str) -> Server:
        self.start_all()
        server = self.started.get(name) or self.start(name)
        return server.wait_ready()

    def stop_all(self) -> None:
        # All asked at once, so their graceful stops overlap; then whatever is left is killed.
        for server in self.started.values():
            server.terminate()
        for server in self.started.values():
            server.stop(grace=STOP_GRACE_S)


@pytest.fixture(scope="session")
def server_pool(
    request: pytest.FixtureRequest, tiny_model: Path, e2e_dir: Path
) -> Iterator[ServerPool]:
    names: list[str] = []
    for item in request.session.items:
        for mark in item.iter_markers("servers"):
            names.extend(n for n in mark.args if n not in names)
    unknown = [n for n in names if n not in SERVER_SPECS]
    assert not unknown, f"no server spec for {unknown}"
    limit = int(os.environ.get("E2E_MAX_SERVERS", "0")) or len(names)
    pool = ServerPool(names[:limit], tiny_model, e2e_dir)
    try:
        yield pool
    finally:
        pool.stop_all()


@pytest.fixture(scope="session")
def docker_daemon() -> Iterator[Daemon]:
    """The suite's own Docker daemon (tests/e2e/docker_daemon.py): every container it made
    removed, the daemon stopped and its folders unmounted and removed at the end."""
    daemon = start_daemon()
    try:
        yield daemon
    finally:
        daemon.close()
