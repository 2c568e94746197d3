"""What a recording keeps of what it reads: a snapshot travels in bug reports.

`recorder(inner)` is a `RecordingHost` with the trims every snapshot gets: of each
/proc/PID/environ only the allocator variables, of each /proc/PID/maps only the shared
file mappings, and in command lines the values of secret-looking options
(`--api-key X`, `--hf-token=X`) are replaced. A caller adds trims of its own commands
(`accelhost snapshot` keeps only the UVB poll threads of `ps -Te`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from accelhost.host.base import Host
from accelhost.host.record import CommandFilter, RecordingHost

# The allocator settings the doctor reports; nothing else of an environment is kept.
ALLOC_CONF_VARS = ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

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


def keep_alloc_vars(environ: str) -> str:
    """What a snapshot keeps of a /proc/PID/environ: the allocator variables, no secrets."""
    return "".join(
        f"{item}\0" for item in environ.split("\0") if item.partition("=")[0] in ALLOC_CONF_VARS
    )


def keep_shared_maps(text: str) -> str:
    """What a snapshot keeps of a /proc/PID/maps: shared file mappings (`rw-s`), the only
    kind a shm_open file is mapped as; libraries and heaps stay out of bug reports."""
    keep = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[1].endswith("s") and parts[5].startswith("/"):
            keep.append(line)
    return "".join(f"{line}\n" for line in keep)


def recorder(
    inner: Host, command_filters: Mapping[str, CommandFilter] | None = None
) -> RecordingHost:
    """A recording host with the snapshot's trims (and `command_filters`: key -> trim)."""
    return RecordingHost(
        inner,
        command_filters,
        file_filters=[
            ("/proc/*/environ", keep_alloc_vars),
            ("/proc/*/cmdline", redact_cmdline),
            ("/proc/*/maps", keep_shared_maps),
        ],
    )
