"""Record a host into a snapshot: what the planner and the doctor read, nothing more.

Trims keep a snapshot small and safe to attach to a bug report: of `ps -Te` only the UVB
poll threads, of each /proc/PID/environ only the allocator variables, and in command lines
the values of secret-looking options (`--api-key X`, `--hf-token=X`) are replaced; of a
container runtime's answers only the fields the doctor reads (no environments).
"""

from __future__ import annotations

import re
from typing import Any

from accelhost.host.base import Host, command_key
from accelhost.host.once import read_once
from accelhost.host.record import RecordingHost
from accelhost.hygiene.facts import keep_alloc_vars
from accelhost.parsers.ps import keep_thread_lines
from accelhost.posixshm import keep_shared_maps
from accelhost.readers import PS_THREADS, read_topology

_SECRET_OPTION = re.compile(
    r"^--?[\w.-]*(key|token|secret|password|passwd|credential)[\w.-]*$", re.I
)
REDACTED = "<redacted>"


def redact_cmdline(raw: str) -> str:
    """A /proc/PID/cmdline with the values of secret-looking options replaced.

    Engine names and titles (what the doctor matches) stay; `--api-key sk-...` does not.
    """
    args = raw.split("\0")
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next and arg:
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = arg.partition("=")
        if _SECRET_OPTION.match(name):
            if eq:
                arg = f"{name}={REDACTED}"
            else:
                hide_next = True
        out.append(arg)
    return "\0".join(out)


def recorder(inner: Host) -> RecordingHost:
    """A recording host with the snapshot's trims."""
    return RecordingHost(
        inner,
        {command_key(PS_THREADS): keep_thread_lines},
        file_filters=[
            ("/proc/*/environ", keep_alloc_vars),
            ("/proc/*/cmdline", redact_cmdline),
            ("/proc/*/maps", keep_shared_maps),
        ],
        http_filter=_trim_runtime_answer,
    )


def _trim_runtime_answer(path: str, body: str) -> str:
    """A container runtime's answer, only the fields the doctor reads (an inspect answer
    holds the container's environment), secret option values of PID 1's argv hidden."""
    from accelhost.containers.docker_api import trim_answer

    return trim_answer(path, body, _redact_argv)


def _redact_argv(argv: list[str]) -> list[str]:
    """An argv with secret option values hidden, inside `sh -c "..."` strings too."""
    words = [
        " ".join(redact_cmdline("\0".join(a.split(" "))).split("\0")) if " " in a else a
        for a in argv
    ]
    return redact_cmdline("\0".join(words)).split("\0")


def record_snapshot(
    inner: Host, device_type: str | None = None, doctor: bool = True
) -> dict[str, Any]:
    """Read `inner` as `plan`/`topo` (and `doctor`) would, and return the snapshot dict."""
    from accelhost.hygiene import read_facts

    rec = recorder(inner)
    once = read_once(rec)  # what the planner and the doctor both read is read once
    topo = read_topology(once, device_type=device_type)
    if doctor:
        read_facts(once)
    return rec.to_snapshot(device_type=topo.family)
