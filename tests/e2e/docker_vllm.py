"""Real vLLM servers in containers of the suite's own daemon, and what each stop leaves.

`PID1` holds the ways users make a container's PID 1 run the engine (the spec's table:
../shared/spec/containers.md). `start_vllm` starts one, `VllmContainer.wait_ready` waits
until it answers, `own_files` says which /dev/shm files are its, and `stop_and_measure` /
`remove_and_measure` do what users do and record how long it took, the exit code and which
of its files are still there.

Which files are a container's: those its processes hold open or mapped while it serves
(/proc/PID/fd and maps of every process in its cgroup), by name or by inode (its
`sem.mp-*` semaphore is mapped only under the temporary name its Worker made it with:
`procs.shm_files_held`). Containers may start side by side: each one's files are those its
own processes hold.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from docker_daemon import REPO_SRC, Container, Daemon, host_mounts
from engine import BASE_ENV, READY_TIMEOUT_S, accelhost_argv, free_port, vllm_argv
from procs import SHM_DIR, shm_files_held, wait_for

HOST_SHM = SHM_DIR  # "/dev/shm/": what --ipc=host containers see as their /dev/shm


@dataclass(frozen=True)
class Pid1(ABC):
    """How a container's PID 1 runs the engine (each kind says its own argv)."""

    label: str  # as the table in docs/e2e.md says it
    options: tuple[str, ...] = ()

    @abstractmethod
    def argv(self, engine: Sequence[str]) -> list[str]: ...


@dataclass(frozen=True)
class ShellThenEcho(Pid1):
    """The seed's pattern: bash stays PID 1, the engine its child, `echo done` after it."""

    def argv(self, engine: Sequence[str]) -> list[str]:
        return ["bash", "-lc", f"{shlex.join(engine)}; echo done"]


@dataclass(frozen=True)
class ShellExec(Pid1):
    """`bash -lc "exec vllm ..."`: the engine itself becomes PID 1."""

    def argv(self, engine: Sequence[str]) -> list[str]:
        return ["bash", "-lc", f"exec {shlex.join(engine)}"]


@dataclass(frozen=True)
class Direct(Pid1):
    """The engine as the container's command (with `--init`, tini is PID 1 above it)."""

    def argv(self, engine: Sequence[str]) -> list[str]:
        return list(engine)


@dataclass(frozen=True)
class UnderRun(Pid1):
    """`accelhost run -- vllm ...` as the entrypoint."""

    def argv(self, engine: Sequence[str]) -> list[str]:
        return accelhost_argv("run", "--", *engine)


PID1: dict[str, Pid1] = {
    "bash": ShellThenEcho('`bash -lc "vllm …; echo done"` (the seed\'s pattern)'),
    "engine": ShellExec('the engine itself (`bash -lc "exec vllm …"`)'),
    "tini": Direct("`--init` (tini, Debian's `tini` package)", ("--init",)),
    "run": UnderRun("`accelhost run -- vllm …`"),
}


def engine_env() -> dict[str, str]:
    """A container's environment for the engine (the Docker containers' and the pod's)."""
    return {
        **BASE_ENV,
        "HOME": "/root",
        "PYTHONPATH": str(REPO_SRC),  # this tree's accelhost, whatever the venv points at
        "PATH": f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }


def container_env() -> list[str]:
    return [a for k, v in engine_env().items() for a in ("-e", f"{k}={v}")]


@dataclass
class VllmContainer:
    container: Container
    pid1: str  # key of PID1
    port: int
    model: Path
    shm_dir: str  # where the host reaches this container's /dev/shm (ends with "/")
    shm_before: set[str]
    started_wall: float  # time.time(): birth times are wall-clock times
    ready_wall: float | None = None
    held: set[str] = field(default_factory=set)  # host paths its processes held
    own: set[str] = field(default_factory=set)  # what it made and held (find_own)

    @property
    def name(self) -> str:
        return self.container.name

    def refresh(self) -> set[int]:
        """Record its processes and the files they hold now (as the host reaches them)."""
        pids = self.container.pids()
        held = shm_files_held(pids, self.shm_dir)
        self.held |= {self.shm_dir + os.path.basename(f) for f in held}
        return pids

    def queues(self) -> set[str]:
        return {f for f in self.held if os.path.basename(f).startswith("psm_")}

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def answers_models(self) -> bool:
        try:
            with urllib.request.urlopen(self.url("/v1/models"), timeout=5) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def answers(self) -> bool:
        """One completion of 4 tokens, as a user checks that a server works."""
        body = json.dumps({"model": str(self.model), "prompt": "hello world", "max_tokens": 4})
        req = urllib.request.Request(
            self.url("/v1/completions"),
            data=body.encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as resp:
            answer = json.load(resp)
        return bool(answer.get("usage", {}).get("completion_tokens") == 4)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> VllmContainer:
        def ready() -> bool:
            self.refresh()
            state = self.container.state()
            if not state["Running"] and not state.get("Restarting"):
                raise AssertionError(
                    f"{self.name} stopped ({state['Status']}, exit {state['ExitCode']}) "
                    f"before it answered\n{self.container.logs()}"
                )
            return self.answers_models()

        wait_for(f"{self.name} to answer on port {self.port}", ready, timeout, every=1.0)
        wait_for(f"{self.name}'s /dev/shm queues", lambda: self.refresh() and self.queues(), 60)
        self.ready_wall = self.ready_wall or time.time()
        return self

    def find_own(self) -> set[str]:
        """Its files: those new since its start that its processes hold; call it while it
        serves (they are remembered)."""
        self.refresh()
        new = {self.shm_dir + n for n in set(os.listdir(self.shm_dir)) - self.shm_before}
        self.own |= self.held & new
        return self.own

    def present(self) -> set[str]:
        return {f for f in self.own if os.path.exists(f)}


def start_vllm(
    daemon: Daemon,
    name: str,
    pid1: str,
    model: Path,
    *,
    ipc: str = "host",
    shm_dir: str = HOST_SHM,
    options: Sequence[str] = (),
) -> VllmContainer:
    """Start vLLM in a container of `daemon` and return at once (then `wait_ready`)."""
    how = PID1[pid1]
    port = free_port()
    engine = vllm_argv(model, port)
    opts = [
        "--network", "host", f"--ipc={ipc}", *how.options, *options,
        *host_mounts(model), *container_env(),
    ]  # fmt: skip
    shm_before, started = set(os.listdir(shm_dir)), time.time()
    container = daemon.create(name, opts, how.argv(engine))
    return VllmContainer(container, pid1, port, model, shm_dir, shm_before, started)


@dataclass
class Stopped:
    """What one stop did: the row of the table."""

    name: str
    pid1: str
    how: str  # "docker stop", "docker rm -f"
    seconds: float
    exit_code: int | None
    own: set[str]
    left: set[str]
    sizes: dict[str, int]  # apparent sizes (bytes) of the files left


def _sizes(paths: set[str]) -> dict[str, int]:
    sizes = {}
    for path in paths:
        with contextlib.suppress(OSError):
            sizes[path] = os.stat(path).st_size
    return sizes


def _after(server: VllmContainer, how: str, seconds: float, exit_code: int | None) -> Stopped:
    wait_for(f"{server.name}'s processes to go", lambda: not server.container.tracked.alive(), 60)
    left = server.present()
    return Stopped(
        server.name, server.pid1, how, seconds, exit_code, set(server.own), left, _sizes(left)
    )


def stop_and_measure(server: VllmContainer) -> Stopped:
    """`docker stop` (SIGTERM to PID 1, SIGKILL after 10 s), timed; then what is left."""
    server.refresh()
    started = time.monotonic()
    server.container.daemon.docker("stop", server.container.id, timeout=120)
    seconds = time.monotonic() - started
    exit_code = int(server.container.state()["ExitCode"])
    return _after(server, "docker stop", seconds, exit_code)


def remove_and_measure(server: VllmContainer) -> Stopped:
    """`docker rm -f` while it serves (SIGKILL to every process), timed; then what is left."""
    server.refresh()
    seconds = server.container.daemon.remove(server.container)
    return _after(server, "docker rm -f", seconds, None)


def crash_api_server(server: VllmContainer) -> int:
    """`kill -9` of the API server, the container's PID 1 here (the engine itself): the
    kernel kills the rest of its PID namespace; `--restart=on-failure` starts it again."""
    pid = server.container.pid1()
    server.refresh()
    server.container.tracked.signal([pid], signal.SIGKILL)
    return pid


def remove_unheld(paths: set[str]) -> None:
    """Remove files our containers left that nothing holds now (the fixtures' finally)."""
    held = shm_files_held(int(p) for p in os.listdir("/proc") if p.isdigit())
    for path in sorted(paths - held):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
