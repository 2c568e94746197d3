"""Read each fact of a host once: `plan` and `topo` read a host through several readers,
and a wrapped host runs each command and reads each file at most once however many ask."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from accelhost.host.base import CommandResult, FileStat, Host, HostWrapper

T = TypeVar("T")


class ReadOnce(HostWrapper):
    """`inner`, with every answer (absent ones too) kept for the next asker; for one short
    read only: a watcher must not wrap its host, or it would never see the machine change."""

    answers_fixed = True

    def __init__(self, inner: Host) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self._commands: dict[str, CommandResult | None] = {}
        self._files: dict[str, str | None] = {}
        self._answers: dict[tuple[str, str], Any] = {}
        self._http: dict[tuple[str, str], str | None] = {}
        self._cri: dict[str, dict[str, Any] | None] = {}

    def _once(self, kind: str, key: str, ask: Callable[[str], T]) -> T:
        with self._lock:
            if (kind, key) not in self._answers:
                self._answers[kind, key] = ask(key)
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
        if path in self._files:
            return self._files[path]
        with self._lock:
            if path not in self._files:
                self._files[path] = self.inner.read_file(path)
            return self._files[path]

    def list_dir(self, path: str) -> list[str] | None:
        names = self._once("dir", path, self.inner.list_dir)
        return None if names is None else list(names)

    def read_link(self, path: str) -> str | None:
        return self._once("link", path, self.inner.read_link)

    def stat_dir(self, path: str) -> list[FileStat] | None:
        entries = self._once("stat_dir", path, self.inner.stat_dir)
        return None if entries is None else list(entries)

    def stat(self, path: str) -> FileStat | None:
        return self._once("stat", path, self.inner.stat)

    def getenv(self, name: str) -> str | None:
        return self._once("env", name, self.inner.getenv)

    def http_get(self, socket_path: str, path: str) -> str | None:
        key = (socket_path, path)
        if key not in self._http:  # not under the lock: a slow socket must not stall readers
            self._http[key] = self.inner.http_get(socket_path, path)
        return self._http[key]

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        if endpoint not in self._cri:  # not under the lock, as http_get
            self._cri[endpoint] = self.inner.cri_look(endpoint)
        return self._cri[endpoint]


def read_once(host: Host) -> Host:
    """`host` read once; one whose answers are fixed already (`answers_fixed`: wrapped
    before, a snapshot) is returned as it is, so layers can each ask for it freely."""
    return host if getattr(host, "answers_fixed", False) else ReadOnce(host)
