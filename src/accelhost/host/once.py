"""Read each fact of a host once: `plan` and `topo` read a host through several readers,
and a wrapped host runs each command and reads each file at most once however many ask."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from accelhost.host.base import CommandResult, FileStat, Host, HostWrapper, http_key

T = TypeVar("T")


class ReadOnce(HostWrapper):
    """`inner`, with every answer (absent ones too) kept for the next asker; for one short
    read only: a watcher must not wrap its host, or it would never see the machine change."""

    answers_fixed = True

    def __init__(self, inner: Host) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._commands: dict[str, CommandResult | None] = {}
        self._answers: dict[tuple[str, str], Any] = {}

    def _once(self, kind: str, key: str, ask: Callable[[], T], locked: bool = True) -> T:
        """The kept answer (read back without the lock), else `ask()`'s, kept. A socket is
        asked outside the lock (`locked=False`): a slow one must not stall the readers."""
        if (kind, key) not in self._answers:
            with self._lock if locked else contextlib.nullcontext():
                if (kind, key) not in self._answers:
                    self._answers[kind, key] = ask()
        answer: T = self._answers[kind, key]
        return answer

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        key = " ".join(argv)  # command_key, inlined: planners ask this on every plan
        if key in self._commands:  # answered before: no lock needed to read it back
            return self._commands[key]
        return self.run_many([argv])[0]

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        keys = [" ".join(a) for a in argvs]  # command_key, inlined (a hot path)
        with self._lock:
            missing = {k: a for a, k in zip(argvs, keys, strict=True) if k not in self._commands}
            if missing:
                # the inner host runs them together (concurrently on a live host)
                results = self.inner.run_many(list(missing.values()))
                self._commands.update(zip(missing, results, strict=True))
            return [self._commands[k] for k in keys]

    def read_file(self, path: str) -> str | None:
        return self._once("file", path, lambda: self.inner.read_file(path))

    def list_dir(self, path: str) -> list[str] | None:
        names = self._once("dir", path, lambda: self.inner.list_dir(path))
        return None if names is None else list(names)

    def read_link(self, path: str) -> str | None:
        return self._once("link", path, lambda: self.inner.read_link(path))

    def stat_dir(self, path: str) -> list[FileStat] | None:
        entries = self._once("stat_dir", path, lambda: self.inner.stat_dir(path))
        return None if entries is None else list(entries)

    def stat(self, path: str) -> FileStat | None:
        return self._once("stat", path, lambda: self.inner.stat(path))

    def getenv(self, name: str) -> str | None:
        return self._once("env", name, lambda: self.inner.getenv(name))

    def http_get(self, socket_path: str, path: str) -> str | None:
        key = http_key(socket_path, path)
        return self._once("http", key, lambda: self.inner.http_get(socket_path, path), False)

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        return self._once("cri", endpoint, lambda: self.inner.cri_look(endpoint), False)


def read_once(host: Host) -> Host:
    """`host` read once; one whose answers are fixed already (`answers_fixed`: wrapped
    before, a snapshot) is returned as it is, so layers can each ask for it freely."""
    return host if getattr(host, "answers_fixed", False) else ReadOnce(host)
