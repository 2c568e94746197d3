"""accelhost: host-side toolkit for accelerator inference servers.

What lives where (planning data flows one way for every family):
- `host/`: the only reader of the machine (live, snapshot, recording and what it
  redacts, `read_once`, `live_host`); `kernel/`: the raw kernel interfaces under it and
  the packages that change the machine (libc, process events, BPF, inotify);
- `parsers/` and `cpulist`: pure text -> typed facts, every id and list bounded;
- `readers/`: the facts layer, host -> one `Topology` (`topology`), family (`family`)
  decided once; and the readers the doctor, the cleaner and `run` share: processes and
  their open files, SysV segments, /dev/shm files and who holds them;
- `planner/`: pure `Topology` -> `Plan` (`plans`), Ascend and GPU strategies, roles;
- `apply/`: binding (its `driver` is the one bind driver; its `identity`: which device is a
  process's: host, visible and logical ids);
- `hygiene/`, `supervisor/`: doctor/clean/watch and `run`, on those shared readers and on
  `remove/` (signals, unlink, IPC_RMID, each re-checked at the moment it is done);
  `containers/`: which container a process is in and what its runtime calls it;
- `pipeline/`, `bench/`: feeding a device, and the two A/B tools (`bench bind`, `bench
  pipeline`); `render`: plain text tables for people;
- `integrations/`: engine plugins (vLLM);
- `cli/`: the command line; `api`: `plan(host)`, the library's front door; `errors`: the
  typed errors (a `UsageError` exits 2, any other `AccelhostError` 1); `formats`: the
  name and version of every JSON document (`format` key) and its units (bytes).

The house rule: only three packages change the machine, each in the ways its own docstring
states (`apply`, `remove`, `supervisor`); nothing else changes the machine (accelhost's
own files and a pipeline's own workers are not the machine). tests/test_house_rules.py
holds every module to it.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from accelhost.errors import (
    AccelhostError,
    ApplyError,
    HostError,
    ParseError,
    PlanError,
    SnapshotError,
)

__version__ = "0.1.0"

__all__ = [
    "AccelhostError",
    "ApplyError",
    "HostError",
    "ParseError",
    "Plan",
    "PlanError",
    "SnapshotError",
    "Topology",
    "__version__",
    "bind_current_process",
    "live_host",
    "load_snapshot",
    "plan",
    "read_topology",
]

_LAZY = {
    "load_snapshot": "accelhost.host.snapshot",
    "live_host": "accelhost.host.live",
    "plan": "accelhost.api",
    "read_topology": "accelhost.readers.topology",
    "bind_current_process": "accelhost.apply.worker",
    "Plan": "accelhost.plans",
    "Topology": "accelhost.topology",
}

if TYPE_CHECKING:
    from accelhost.api import plan
    from accelhost.apply.worker import bind_current_process
    from accelhost.host.live import live_host
    from accelhost.host.snapshot import load_snapshot
    from accelhost.plans import Plan
    from accelhost.readers.topology import read_topology
    from accelhost.topology import Topology


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A package's module `__getattr__` that imports `names[name]` (a module holding the
    attribute of that name) on first use and keeps it: a worker's `import accelhost` must
    stay cheap (no CLI, no table rendering, no metrics), and `accelhost --help` must not
    load what it does not use either.

    No name may be a submodule's name too: importing the submodule would set the module on
    the package in the name's place (tests/test_import_graph.py checks)."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(names[name]), name)
        return value

    return __getattr__


__getattr__ = lazy_names(__name__, _LAZY)
