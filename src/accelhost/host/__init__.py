"""The host door: the only reader of the machine.

Everything accelhost learns about a machine comes through `Host`: run a command and get its
text, read a file, list a directory, read a symlink, look up an environment variable and
the CPU architecture. `LiveHost` asks this machine; `SnapshotHost` answers from a recorded
JSON file; `RecordingHost` wraps a live host and writes down what was asked.

Only `base` is imported eagerly: `accelhost.procs` (and so `accelhost run`, PID 1 of every
container) needs the `Host` protocol, not snapshots, recordings or a thread pool.
"""

from typing import TYPE_CHECKING, Any

from accelhost.host.base import CommandResult, Host, command_key

__all__ = [
    "SNAPSHOT_FORMAT",
    "CommandResult",
    "Host",
    "LiveHost",
    "RecordingHost",
    "SnapshotHost",
    "command_key",
    "load_snapshot",
]

_LAZY = {
    "LiveHost": "accelhost.host.live",
    "RecordingHost": "accelhost.host.record",
    "SNAPSHOT_FORMAT": "accelhost.host.snapshot",
    "SnapshotHost": "accelhost.host.snapshot",
    "load_snapshot": "accelhost.host.snapshot",
}

if TYPE_CHECKING:
    from accelhost.host.live import LiveHost
    from accelhost.host.record import RecordingHost
    from accelhost.host.snapshot import SNAPSHOT_FORMAT, SnapshotHost, load_snapshot


def __getattr__(name: str) -> Any:
    try:
        module_name = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'accelhost.host' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
