"""The host door: the only reader of the machine.

Everything accelhost learns about a machine comes through `Host`: run a command and get its
text, read a file, list a directory, read a symlink, stat a directory's entries or one
path (`FileStat`: size, blocks, owner, times, identity, birth), look up an environment
variable, ask a container runtime's unix socket (`http_get`) and the CPU architecture.
What lives where:
- `base`: the `Host` protocol, `CommandResult`, `FileStat` and the `HostWrapper` base;
- `live`: `LiveHost`, this machine (C locale, timeouts, independent commands at once;
  scandir/lstat/statx for stats), and `live_host()`, the one place a live host is made;
- `snapshot`: `SnapshotHost` / `load_snapshot`, a recorded JSON file (bounded in size);
- `record`: `RecordingHost`, which wraps a host and writes down what was asked;
- `redact`: `recorder(host)`, a recording host with what a snapshot must not keep trimmed
  (secrets in command lines, environments, private mappings);
- `once`: `read_once(host)`, which wraps a host so that each command, file, directory,
  link, stat, socket answer and variable is read at most once however many readers ask;
- `libc`: the one binding of the C library and of the syscalls Python's `os` lacks;
- `unixhttp`: the small GET over a unix socket `LiveHost.http_get` uses (hard 1 s limit).

Reading facts once, for any code that looks at a host through several readers (the
planner does, and the doctor can)::

    host = read_once(live_host())        # or a SnapshotHost; wrapping twice is harmless
    topo = read_topology(host)           # npu-smi / nvidia-smi / lscpu run once here ...
    facts = read_facts(host)             # ... and are not run again here

Keep such a wrapper for one look at the host: a watcher that loops must not, or it would
never see the machine change. The typed readers of single facts (allowed CPUs, cgroup
cpuset, NUMA nodes) are in `accelhost.readers.cpus`.

Only `base` is imported eagerly: `accelhost.readers.procs` (and so `accelhost run`, PID 1
of every container) needs the `Host` protocol, not snapshots, recordings or a thread pool.
"""

from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    try:
        module_name = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'accelhost.host' has no attribute {name!r}") from None
    import importlib

    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value
