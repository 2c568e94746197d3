"""The one builder of fake hosts for tests, and a host that counts what is read.

- `FakeMachine`: a recorded machine (files, directories, links, stats, commands, environment)
  as a snapshot dictionary or a `SnapshotHost`. The family-specific builders
  (`ascend_hosts.AscendHost`, `gpu/gpu_hosts.FakeHost`) write their texts into one.
- `CountingHost`: wraps any host and counts every command, file, directory, link, stat
  and variable asked for, so a test can prove that a command reads each fact once.
- `fake_tools`: real executables (`npu-smi`, `nvidia-smi`, `lscpu`, ...) on a PATH that
  print recorded output and log each call, to count what a live host really runs.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelhost.host.base import CommandResult, FileStat, Host, HostWrapper, command_key
from accelhost.host.snapshot import SNAPSHOT_FORMAT, SnapshotHost, stat_to_dict


@dataclass
class FakeMachine:
    """A machine as a snapshot records it; absent keys mean absent things."""

    machine: str = "x86_64"
    device_type: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    commands: dict[str, Any] = field(default_factory=dict)
    stat_dirs: dict[str, list[FileStat]] = field(default_factory=dict)
    stats: dict[str, FileStat] = field(default_factory=dict)
    http: dict[str, str] = field(default_factory=dict)  # "SOCKET PATH" -> body
    cri: dict[str, dict[str, Any]] = field(default_factory=dict)  # endpoint -> CRI look

    def snapshot(self) -> dict[str, Any]:
        data: dict[str, Any] = {"format": SNAPSHOT_FORMAT, "machine": self.machine}
        if self.device_type:
            data["device_type"] = self.device_type
        data["env"] = dict(self.env)
        data["files"] = dict(self.files)
        data["dirs"] = {k: list(v) for k, v in self.dirs.items()}
        if self.links:
            data["links"] = dict(self.links)
        if self.stat_dirs:
            data["stat_dirs"] = {k: [stat_to_dict(e) for e in v] for k, v in self.stat_dirs.items()}
        if self.stats:
            data["stats"] = {k: stat_to_dict(v) for k, v in self.stats.items()}
        data["commands"] = dict(self.commands)
        if self.http:
            data["http"] = dict(self.http)
        if self.cri:
            data["cri"] = dict(self.cri)
        return data

    def host(self, source: str = "fake-host") -> SnapshotHost:
        return SnapshotHost(self.snapshot(), source=source)


class CountingHost(HostWrapper):
    """`inner`, counting each question by kind and key (a command's argv joined by spaces)."""

    def __init__(self, inner: Host) -> None:
        super().__init__(inner)
        self.commands: Counter[str] = Counter()
        self.files: Counter[str] = Counter()
        self.dirs: Counter[str] = Counter()
        self.links: Counter[str] = Counter()
        self.env: Counter[str] = Counter()
        self.stat_dirs: Counter[str] = Counter()
        self.stats: Counter[str] = Counter()
        self.http: Counter[str] = Counter()
        self.cri: Counter[str] = Counter()

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        self.commands[command_key(argv)] += 1
        return self.inner.run(argv)

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        for argv in argvs:
            self.commands[command_key(argv)] += 1
        return self.inner.run_many(argvs)

    def read_file(self, path: str) -> str | None:
        self.files[path] += 1
        return self.inner.read_file(path)

    def list_dir(self, path: str) -> list[str] | None:
        self.dirs[path] += 1
        return self.inner.list_dir(path)

    def read_link(self, path: str) -> str | None:
        self.links[path] += 1
        return self.inner.read_link(path)

    def stat_dir(self, path: str) -> list[FileStat] | None:
        self.stat_dirs[path] += 1
        return self.inner.stat_dir(path)

    def stat(self, path: str) -> FileStat | None:
        self.stats[path] += 1
        return self.inner.stat(path)

    def getenv(self, name: str) -> str | None:
        self.env[name] += 1
        return self.inner.getenv(name)

    def http_get(self, socket_path: str, path: str) -> str | None:
        self.http[f"{socket_path} {path}"] += 1
        return self.inner.http_get(socket_path, path)

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        self.cri[endpoint] += 1
        return self.inner.cri_look(endpoint)

    def repeated(self) -> dict[str, int]:
        """Everything asked for more than once, as `kind key` -> count (empty: all once)."""
        out: dict[str, int] = {}
        for kind, counter in (
            ("command", self.commands),
            ("file", self.files),
            ("dir", self.dirs),
            ("link", self.links),
            ("env", self.env),
            ("stat_dir", self.stat_dirs),
            ("stat", self.stats),
            ("http", self.http),
            ("cri", self.cri),
        ):
            out.update({f"{kind} {k}": n for k, n in counter.items() if n > 1})
        return out


@dataclass
class ToolLog:
    """The calls the fake tools received, one line per call (`tool args...`)."""

    path: Path

    def calls(self) -> Counter[str]:
        if not self.path.exists():
            return Counter()
        return Counter(ln.strip() for ln in self.path.read_text().splitlines() if ln.strip())


def fake_tools(directory: Path, outputs: Mapping[str, str], tools: Sequence[str] = ()) -> ToolLog:
    """Write one executable per tool in `directory` answering the recorded `outputs`.

    `outputs` maps a command key (`npu-smi info -m`) to its standard output; a tool named in
    `tools` (or in a key) but asked something not recorded exits 1 with no output. Every
    call is appended to the log, so the test counts what really ran.
    """
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "calls.log"
    names = set(tools) | {key.split(" ", 1)[0] for key in outputs}
    for name in sorted(names):
        cases = []
        for n, (key, text) in enumerate(sorted(outputs.items())):
            tool, _, args = key.partition(" ")
            if tool != name:
                continue
            out = directory / f"{name}.{n}.out"
            out.write_text(text)
            cases.append(f"  {shlex.quote(args)}) cat {shlex.quote(str(out))} ;;\n")
        script = directory / name
        script.write_text(
            "#!/bin/sh\n"
            f'echo "{name} $*" >> {shlex.quote(str(log))}\n'
            'case "$*" in\n' + "".join(cases) + "  *) exit 1 ;;\nesac\n"
        )
        os.chmod(script, 0o755)
    return ToolLog(log)
