"""Record a host into a snapshot: what the planner and the doctor read, nothing more.

Two trims keep a snapshot small and safe to attach to a bug report: of `ps -Te` only the
UVB poll threads, of each /proc/PID/environ only the allocator variables (no tokens).
"""

from __future__ import annotations

from typing import Any

from accelhost.host.base import Host, command_key
from accelhost.host.record import RecordingHost
from accelhost.hygiene.facts import keep_alloc_vars
from accelhost.parsers.ps import keep_thread_lines
from accelhost.readers import PS_THREADS, read_topology


def recorder(inner: Host) -> RecordingHost:
    """A recording host with the snapshot's trims."""
    return RecordingHost(
        inner,
        {command_key(PS_THREADS): keep_thread_lines},
        file_filters=[("/proc/*/environ", keep_alloc_vars)],
    )


def record_snapshot(
    inner: Host, device_type: str | None = None, doctor: bool = True
) -> dict[str, Any]:
    """Read `inner` as `plan`/`topo` (and `doctor`) would, and return the snapshot dict."""
    from accelhost.hygiene import read_facts

    rec = recorder(inner)
    topo = read_topology(rec, device_type=device_type)
    if doctor:
        read_facts(rec)
    return rec.to_snapshot(device_type=topo.family)
