"""The snapshot host: one recorded machine in one JSON file (format accelhost-snapshot/1).

Replay is exact: nothing falls back to the live machine. A malformed file is refused with
one `SnapshotError` naming the file and the problem; a file larger than any real recording
(`MAX_SNAPSHOT_BYTES`) is refused before it is read, so a corrupt or hostile one costs
neither time nor memory.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelhost import formats
from accelhost.errors import SnapshotError
from accelhost.host.base import CommandResult, FileStat, command_key, http_key

if TYPE_CHECKING:
    from importlib.abc import Traversable

SNAPSHOT_FORMAT = formats.SNAPSHOT
EXAMPLE_PREFIX = "example:"
# A 640-CPU host records into a few hundred kilobytes; 64 MiB leaves room for any real
# machine (and a doctor's view of thousands of processes) while refusing a giant file.
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


class SnapshotHost:
    """Answers the host calls from a recorded snapshot dictionary."""

    # Every answer is in memory and never changes: `read_once` need not wrap it.
    answers_fixed = True
    is_live = False

    def __init__(self, data: Mapping[str, Any], source: str = "<snapshot>") -> None:
        _validate(data, source)
        self.source = source
        self.machine: str = data.get("machine", "unknown")
        self.device_type: str | None = data.get("device_type")
        # the `--pci` addresses the host was recorded with: a replay plans them again
        pci = data.get("pci")
        self.recorded_pci: tuple[str, ...] | None = None if pci is None else tuple(pci)
        self._env: dict[str, str] = dict(data.get("env", {}))
        self._files: dict[str, str] = dict(data.get("files", {}))
        self._dirs: dict[str, list[str]] = {k: list(v) for k, v in data.get("dirs", {}).items()}
        self._links: dict[str, str] = dict(data.get("links", {}))
        self._stat_dirs: dict[str, list[FileStat]] = {
            path: [stat_from_dict(e) for e in entries]
            for path, entries in data.get("stat_dirs", {}).items()
        }
        self._stats: dict[str, FileStat] = {
            path: stat_from_dict(e) for path, e in data.get("stats", {}).items()
        }
        self._listed = {
            f"{path.rstrip('/')}/{e.name}": e
            for path, entries in self._stat_dirs.items()
            for e in entries
            if e.kind != "link"
        }
        # what a container runtime answered on its unix socket: "SOCKET PATH" -> body
        self._http: dict[str, str] = dict(data.get("http", {}))
        # what a CRI runtime said on its gRPC socket: endpoint -> accelhost.host.cri's data
        self._cri: dict[str, dict[str, Any]] = dict(data.get("cri", {}))
        clock = data.get("clock")
        self._clock: float | None = None if clock is None else float(clock)
        self._commands: dict[str, CommandResult] = {}
        for key, value in data.get("commands", {}).items():
            said: dict[str, Any] = {"stdout": value} if isinstance(value, str) else value
            self._commands[key] = CommandResult(said.get("stdout", ""), said.get("rc", 0))

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        return self._commands.get(command_key(argv))

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        return [self.run(a) for a in argvs]

    def read_file(self, path: str) -> str | None:
        return self._files.get(path)

    def list_dir(self, path: str) -> list[str] | None:
        return self._dirs.get(path)

    def read_link(self, path: str) -> str | None:
        return self._links.get(path)

    def stat_dir(self, path: str) -> list[FileStat] | None:
        entries = self._stat_dirs.get(path)
        return None if entries is None else list(entries)

    def stat(self, path: str) -> FileStat | None:
        """The recorded stat, else the file's entry in its recorded directory listing (a
        file listed is the same file asked again; a link's entry is not its target)."""
        return self._stats.get(path) or self._listed.get(path)

    def getenv(self, name: str) -> str | None:
        return self._env.get(name)

    def clock(self) -> float | None:
        """The clock the recording read (older recordings kept none)."""
        return self._clock

    def http_get(self, socket_path: str, path: str) -> str | None:
        return self._http.get(http_key(socket_path, path))

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        # the parser takes any shape (a hand-edited file): a copy, so it cannot change ours
        found = self._cri.get(endpoint)
        return None if found is None else json.loads(json.dumps(found))


# How a snapshot writes one `FileStat` (the "stat_dirs" and "stats" sections): the fields
# by name, `birth` left out when the kernel kept none.
_STAT_INTS = ("size", "blocks", "uid", "dev", "inode")
_STAT_FLOATS = ("mtime", "ctime")
_STAT_KEYS = ("name", "kind", *_STAT_INTS, *_STAT_FLOATS, "owner")  # in the order written
_STAT_TYPES = (
    (("name", "kind", "owner"), str, "a string"),
    (_STAT_INTS, int, "an integer"),
    ((*_STAT_FLOATS, "birth"), int | float, "a number"),
)


def stat_to_dict(st: FileStat) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(st, k) for k in _STAT_KEYS}
    if st.birth is not None:
        out["birth"] = st.birth
    return out


def stat_from_dict(data: Mapping[str, Any]) -> FileStat:
    fields: dict[str, Any] = {k: data[k] for k in ("name", "kind", "owner", *_STAT_INTS)}
    fields.update((k, float(data[k])) for k in _STAT_FLOATS)
    birth = data.get("birth")
    return FileStat(**fields, birth=None if birth is None else float(birth))


def _stat_problem(entry: Any) -> str | None:
    """What is wrong with one recorded `FileStat`, or None (a bool is no number here)."""
    if not isinstance(entry, dict):
        return "is not an object"
    for keys, kind, what in _STAT_TYPES:
        for key in keys:
            value = entry.get(key)
            if (not isinstance(value, kind) or isinstance(value, bool)) and not (
                key == "birth" and value is None  # not kept by the kernel
            ):
                return f"needs {what} {key!r}"
    return None


def _examples() -> Traversable | Path:
    """The bundled recordings' folder: beside this package's modules when they are files
    (importlib.resources, with the zipfile and tempfile it imports, cost a sixth of an
    example `plan`'s start), through importlib.resources when they are not (a zip)."""
    beside = Path(__file__).resolve().parent.parent / "data" / "examples"
    if beside.is_dir():
        return beside
    from importlib import resources

    return resources.files("accelhost") / "data" / "examples"


def example_names() -> list[str]:
    """Names of the recorded hosts bundled with the package (`example:NAME`)."""
    root = _examples()
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".json"))


def load_snapshot(path: str | Path) -> SnapshotHost:
    """Load a snapshot file, or a bundled example given as `example:NAME`."""
    text_path = str(path)
    if text_path.startswith(EXAMPLE_PREFIX):
        resource = _examples() / f"{text_path.removeprefix(EXAMPLE_PREFIX)}.json"
        if not resource.is_file():
            raise SnapshotError(
                f"snapshot {text_path}: no such bundled example "
                f"(have: {', '.join(example_names())})"
            )
        raw = resource.read_bytes()
    else:
        raw = _read_bounded(text_path)
    if len(raw) > MAX_SNAPSHOT_BYTES:
        raise SnapshotError(_too_big(text_path, len(raw)))
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise SnapshotError(f"snapshot {text_path}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SnapshotError(
            f"{text_path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    except RecursionError:
        raise SnapshotError(f"snapshot {text_path}: JSON nested too deeply") from None
    return SnapshotHost(data, source=text_path)


def _too_big(path: str, size: int) -> str:
    return (
        f"snapshot {path}: {size} bytes, more than the {MAX_SNAPSHOT_BYTES // (1024 * 1024)} "
        "MiB any recorded host needs; refused unread"
    )


def _read_bounded(path: str) -> bytes:
    """The bytes of a regular file no larger than MAX_SNAPSHOT_BYTES (checked before
    reading, and again while reading in case it grows)."""
    try:
        with open(path, "rb") as fh:
            info = os.fstat(fh.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(info.st_mode):
                raise SnapshotError(f"snapshot {path}: not a regular file")
            if info.st_size > MAX_SNAPSHOT_BYTES:
                raise SnapshotError(_too_big(path, info.st_size))
            return fh.read(MAX_SNAPSHOT_BYTES + 1)
    except FileNotFoundError:
        raise SnapshotError(f"snapshot {path}: no such file") from None
    except IsADirectoryError:
        raise SnapshotError(f"snapshot {path}: is a directory, not a snapshot file") from None
    except OSError as exc:
        raise SnapshotError(f"snapshot {path}: cannot read: {exc.strerror}") from None


def _validate(data: Any, source: str) -> None:
    def fail(problem: str) -> None:
        raise SnapshotError(f"snapshot {source}: {problem}")

    def check_stats(entries: Iterable[tuple[str, Any]]) -> None:
        for where, entry in entries:
            if problem := _stat_problem(entry):
                fail(f"{where} {problem}")

    if not isinstance(data, dict):
        fail("a snapshot is a JSON object")
    fmt = data.get("format")
    if fmt != SNAPSHOT_FORMAT:
        fail(f"unsupported format {fmt!r} (expected {SNAPSHOT_FORMAT!r})")
    for key in ("machine", "device_type"):
        if key in data and data[key] is not None and not isinstance(data[key], str):
            fail(f"'{key}' must be a string")
    clock = data.get("clock")
    if clock is not None and (isinstance(clock, bool) or not isinstance(clock, (int, float))):
        fail("'clock' must be a number (epoch seconds)")
    pci = data.get("pci")
    if pci is not None and not (isinstance(pci, list) and all(isinstance(a, str) for a in pci)):
        fail("'pci' must be a list of PCI addresses")
    for key in ("env", "files", "links", "http"):
        section = data.get(key, {})
        if not isinstance(section, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in section.items()
        ):
            fail(f"'{key}' must map strings to strings")
    dirs = data.get("dirs", {})
    if not isinstance(dirs, dict) or not all(
        isinstance(v, list) and all(isinstance(e, str) for e in v) for v in dirs.values()
    ):
        fail("'dirs' must map paths to lists of names")
    cri = data.get("cri", {})
    if not isinstance(cri, dict) or not all(
        isinstance(k, str) and isinstance(v, dict) for k, v in cri.items()
    ):
        fail("'cri' must map endpoints to objects")
    stat_dirs = data.get("stat_dirs", {})
    if not isinstance(stat_dirs, dict) or not all(isinstance(v, list) for v in stat_dirs.values()):
        fail("'stat_dirs' must map paths to lists of entries")
    check_stats((f"an entry of stat_dirs {p!r}", e) for p, es in stat_dirs.items() for e in es)
    stats = data.get("stats", {})
    if not isinstance(stats, dict):
        fail("'stats' must map paths to entries")
    check_stats((f"stats {p!r}", e) for p, e in stats.items())
    commands = data.get("commands", {})
    if not isinstance(commands, dict):
        fail("'commands' must be an object")
    for key, value in commands.items():
        if not isinstance(value, str) and not (
            isinstance(value, dict)
            and isinstance(value.get("stdout", ""), str)
            and isinstance(value.get("rc", 0), int)
            and not isinstance(value.get("rc", 0), bool)
        ):
            fail(f"command {key!r} must be its output text or {{'stdout': str, 'rc': int}}")
