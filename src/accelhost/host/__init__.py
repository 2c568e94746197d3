"""The host door: the only reader of the machine.

Everything accelhost learns about a machine comes through `Host`: commands, files,
directories, links, stats (`FileStat`), environment variables, a container runtime's unix
socket (`http_get`), a CRI runtime's gRPC socket (`cri_look`) and the CPU architecture.
What lives where:
- `base`: the `Host` protocol, `CommandResult`, `FileStat` and the `HostWrapper` base;
- `live`: `LiveHost`, this machine, and `live_host()`, the one place a live host is made;
- `snapshot`: `SnapshotHost` / `load_snapshot`, a recorded JSON file (bounded in size);
- `record`, `redact`: `RecordingHost`, and `recorder(host)`, one that keeps no secrets of
  /proc (of a runtime's answers, its caller's `http_filter`: `snapshot` trims them);
- `once`: `read_once(host)`, each answer read at most once however many readers ask (for
  one look at a host; a watcher that loops must not keep one, or it never sees a change);
- `unixhttp`: the GET over a unix socket behind `LiveHost.http_get` (hard 1 s limit);
- `cri`: one CRI look over gRPC as plain data, behind `LiveHost.cri_look` (one 1 s
  deadline; grpcio and protobuf load only there), on `cri_api/`: accelhost's subset of
  the Kubernetes CRI (`api.proto`, its generated messages) and `client.rpc`, the call.

Only `base` is imported eagerly: `accelhost run` (PID 1 of every container) needs the
`Host` protocol, not snapshots, recordings or a thread pool.
"""

from typing import TYPE_CHECKING

from accelhost import lazy_names
from accelhost.host.base import CommandResult, FileStat, Host, command_key

__all__ = [
    "SNAPSHOT_FORMAT",
    "CommandResult",
    "FileStat",
    "Host",
    "LiveHost",
    "RecordingHost",
    "ReadOnce",
    "SnapshotHost",
    "command_key",
    "live_host",
    "load_snapshot",
    "read_once",
]

_LAZY = {
    "LiveHost": "accelhost.host.live",
    "live_host": "accelhost.host.live",
    "RecordingHost": "accelhost.host.record",
    "SNAPSHOT_FORMAT": "accelhost.host.snapshot",
    "SnapshotHost": "accelhost.host.snapshot",
    "load_snapshot": "accelhost.host.snapshot",
    "ReadOnce": "accelhost.host.once",
    "read_once": "accelhost.host.once",
}

if TYPE_CHECKING:
    from accelhost.host.live import LiveHost, live_host
    from accelhost.host.once import ReadOnce, read_once
    from accelhost.host.record import RecordingHost
    from accelhost.host.snapshot import SNAPSHOT_FORMAT, SnapshotHost, load_snapshot


__getattr__ = lazy_names(__name__, _LAZY)
