"""What a recording keeps of what it reads: a snapshot travels in bug reports.

`recorder(inner)` is a `RecordingHost` with the trims every snapshot gets: of each
/proc/PID/environ only the allocator variables, of each /proc/PID/maps only the shared
file mappings, and in command lines the values of secret-looking options
(`--api-key X`, `--hf-token=X`) are replaced. A caller adds trims of its own commands
(`accelhost snapshot` keeps only the UVB poll threads of `ps -Te`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a doctor reads ALLOC_CONF_VARS and records nothing
    from accelhost.host.base import Host
    from accelhost.host.record import CommandFilter, RecordingHost

# The allocator settings the doctor reports; nothing else of an environment is kept.
ALLOC_CONF_VARS = ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

_SECRET_WORD = r"(?:key|token|secret|password|passwd|credential)"
_SECRET_OPTION = re.compile(rf"^--?[\w.-]*{_SECRET_WORD}[\w.-]*$", re.I)
# Inside one argument (`bash -lc "vllm serve m --api-key K"`, `sh -c 'HF_TOKEN=abc python
# ...'`, `env HF_TOKEN=abc`, a URL's `?token=abc`): an option and its value (after `=` or
# blanks), or a variable assignment; the value is a quoted string or a run of non-blanks.
# A value that is another option (`--no-key-check --port 1`) is not one.
_VALUE = r"(\"[^\"]*\"|'[^']*'|(?!--)[^\s\"']+)"
_INLINE_OPTION = re.compile(rf"(?<![\w.-])(--?[\w.-]*{_SECRET_WORD}[\w.-]*)(=|\s+){_VALUE}", re.I)
_INLINE_ASSIGN = re.compile(rf"(?<![\w.-])((?=\w*{_SECRET_WORD})[A-Za-z_]\w*)={_VALUE}", re.I)
REDACTED = "<redacted>"


def _redact_inside(arg: str) -> str:
    """An argument with the values of the secret-looking options and variables in it replaced."""
    arg = _INLINE_OPTION.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", arg)
    return _INLINE_ASSIGN.sub(lambda m: f"{m[1]}={REDACTED}", arg)


def redact_cmdline(raw: str) -> str:
    """A /proc/PID/cmdline with the values of secret-looking options and variables replaced,
    as separate arguments (`--api-key K`, `--hf-token=K`, `HF_TOKEN=K`) and inside one
    argument that holds a shell command (`bash -lc "vllm serve m --api-key K"`).

    Engine names and titles (what the doctor matches) stay; `--api-key sk-...` does not.
    """
    out: list[str] = []
    hide_next = False
    for arg in raw.split("\0"):
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
        else:
            arg = _redact_inside(arg)
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


def redact_argv(argv: list[str]) -> list[str]:
    """An argv (a container's PID 1, as its runtime reports it) redacted as a cmdline is."""
    return redact_cmdline("\0".join(argv)).split("\0")


def recorder(
    inner: Host,
    command_filters: Mapping[str, CommandFilter] | None = None,
    http_filter: Callable[[str, str], str] | None = None,
) -> RecordingHost:
    """A recording host with the snapshot's trims (and `command_filters`: key -> trim;
    `http_filter`: what to keep of a container runtime's answer to a path)."""
    from accelhost.host.record import RecordingHost

    return RecordingHost(
        inner,
        command_filters,
        file_filters=[
            ("/proc/*/environ", keep_alloc_vars),
            ("/proc/*/cmdline", redact_cmdline),
            ("/proc/*/maps", keep_shared_maps),
        ],
        http_filter=http_filter,
    )
