"""Recording: wrap a host and write down every answer, to replay it elsewhere."""

from __future__ import annotations

import fnmatch
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from accelhost.host.base import CommandResult, FileStat, Host, HostWrapper, command_key, http_key
from accelhost.host.snapshot import SNAPSHOT_FORMAT, stat_to_dict

# A filter trims what is stored for a command to what the readers actually use.
CommandFilter = Callable[[str], str]
T = TypeVar("T")
# A snapshot's sections, in the order it is written; those in _ALWAYS even when empty.
_SECTIONS = ("env", "files", "dirs", "links", "stat_dirs", "stats", "commands", "http", "cri")
_ALWAYS = ("env", "files", "dirs", "commands")


def _as_json(value: Any) -> Any:
    """An answer as a snapshot writes it (a listing copied, so later changes stay out)."""
    if isinstance(value, FileStat):
        return stat_to_dict(value)
    if isinstance(value, CommandResult):
        return value.stdout if value.rc == 0 else {"stdout": value.stdout, "rc": value.rc}
    if isinstance(value, list):
        return [_as_json(v) for v in value]
    return value


class RecordingHost(HostWrapper):
    """Answers from `inner` and keeps every answer for `to_snapshot()` (absent ones not:
    in a snapshot, absence already means "not there")."""

    def __init__(
        self,
        inner: Host,
        command_filters: Mapping[str, CommandFilter] | None = None,
        file_filters: Sequence[tuple[str, CommandFilter]] = (),
        http_filter: Callable[[str, str], str] | None = None,
    ) -> None:
        super().__init__(inner)
        self._filters = dict(command_filters or {})
        # (fnmatch pattern, trim): e.g. keep only allocator variables of /proc/*/environ,
        # since a snapshot travels in bug reports and environments hold secrets.
        self._file_filters = list(file_filters)
        # (path, body) -> what is kept of a runtime's answer (an inspect holds its env)
        self._http_filter = http_filter
        self._lock = threading.Lock()
        self._kept: dict[str, dict[str, Any]] = {section: {} for section in _SECTIONS}
        self.clock_read: float | None = None

    def _keep(self, section: str, key: str, value: T) -> T:
        """`value` kept under `key` of `section`, unless absent; returned."""
        if value is not None:
            with self._lock:
                self._kept[section][key] = _as_json(value)
        return value

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        return self.run_many([argv])[0]

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        results = self.inner.run_many(argvs)
        for argv, result in zip(argvs, results, strict=True):
            key, kept = command_key(argv), result
            if result is not None and (keep := self._filters.get(key)):
                kept = CommandResult(keep(result.stdout), result.rc)
            self._keep("commands", key, kept)
        return results

    def read_file(self, path: str) -> str | None:
        text = self.inner.read_file(path)
        keep = next((f for p, f in self._file_filters if fnmatch.fnmatchcase(path, p)), None)
        self._keep("files", path, keep(text) if keep and text is not None else text)
        return text

    def list_dir(self, path: str) -> list[str] | None:
        return self._keep("dirs", path, self.inner.list_dir(path))

    def read_link(self, path: str) -> str | None:
        return self._keep("links", path, self.inner.read_link(path))

    def stat_dir(self, path: str) -> list[FileStat] | None:
        return self._keep("stat_dirs", path, self.inner.stat_dir(path))

    def stat(self, path: str) -> FileStat | None:
        return self._keep("stats", path, self.inner.stat(path))

    def getenv(self, name: str) -> str | None:
        return self._keep("env", name, self.inner.getenv(name))

    def clock(self) -> float | None:
        # one look reads it once (the runtime's events up to then); the last one is kept
        self.clock_read = self.inner.clock()
        return self.clock_read

    def http_get(self, socket_path: str, path: str) -> str | None:
        body = self.inner.http_get(socket_path, path)
        kept = self._http_filter(path, body) if self._http_filter and body is not None else body
        self._keep("http", http_key(socket_path, path), kept)
        return body

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        # the answer is trimmed already (accelhost.host.cri keeps no environment)
        return self._keep("cri", endpoint, self.inner.cri_look(endpoint))

    def to_snapshot(
        self, device_type: str | None = None, pci: Sequence[str] | None = None
    ) -> dict[str, Any]:
        """The snapshot dictionary of everything read so far (format accelhost-snapshot/1);
        `pci`: the addresses `--pci` named, replayed as if given again."""
        data: dict[str, Any] = {"format": SNAPSHOT_FORMAT, "machine": self.machine}
        if device_type:
            data["device_type"] = device_type
        if pci:
            data["pci"] = list(pci)
        if self.clock_read is not None:
            data["clock"] = self.clock_read
        for section, kept in self._kept.items():
            if kept or section in _ALWAYS:
                data[section] = dict(sorted(kept.items()))
        return data
