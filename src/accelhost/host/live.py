"""The live host: this machine, read-only."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping, Sequence

from accelhost.errors import HostError
from accelhost.host.base import CommandResult, command_key

# Tools like npu-smi answer in seconds on a busy host but can hang on a wedged driver.
DEFAULT_TIMEOUT_S = 60.0
_C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LC_MESSAGES": "C"}


class LiveHost:
    """Reads this machine. Commands run with the C locale and a timeout."""

    def __init__(
        self, timeout: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None
    ) -> None:
        self.timeout = timeout
        self._env = dict(os.environ if env is None else env)
        self._run_env = {**self._env, **_C_LOCALE}

    @property
    def machine(self) -> str:
        return platform.machine()

    @property
    def device_type(self) -> str | None:
        return None

    @property
    def is_live(self) -> bool:
        return True

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        try:
            proc = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self._run_env,
                timeout=self.timeout,
                check=False,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError):
            return None
        except subprocess.TimeoutExpired:
            raise HostError(
                f"`{command_key(argv)}` did not answer within {self.timeout:g} s"
            ) from None
        return CommandResult(proc.stdout.decode("utf-8", "replace"), proc.returncode)

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        # Each npu-smi call can take seconds; reading the host should cost the slowest one.
        if len(argvs) <= 1:
            return [self.run(a) for a in argvs]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(16, len(argvs))) as pool:
            return list(pool.map(self.run, argvs))

    def read_file(self, path: str) -> str | None:
        # Plain os calls: half the cost of a buffered file object, and a bind or a doctor
        # reads many small /proc and /sys files (the one file reader of live code).
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        chunks = []
        try:
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
        except OSError:
            return None
        finally:
            os.close(fd)
        return b"".join(chunks).decode("utf-8", "replace")

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def read_link(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def getenv(self, name: str) -> str | None:
        return self._env.get(name)

    def http_get(self, socket_path: str, path: str) -> str | None:
        from accelhost.host.unixhttp import unix_http_get

        return unix_http_get(socket_path, path)
