"""The host door: the only reader of the machine.

Everything accelhost learns about a machine comes through `Host`: run a command and get its
text, read a file, list a directory, read a symlink, look up an environment variable and
the CPU architecture. `LiveHost` asks this machine; `SnapshotHost` answers from a recorded
JSON file; `RecordingHost` wraps a live host and writes down what was asked.
"""

from accelhost.host.base import CommandResult, Host, command_key
from accelhost.host.live import LiveHost
from accelhost.host.record import RecordingHost
from accelhost.host.snapshot import SNAPSHOT_FORMAT, SnapshotHost, load_snapshot

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
