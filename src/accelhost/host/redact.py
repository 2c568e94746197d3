"""What a recording keeps of what it reads (a snapshot travels in bug reports), and what
output shows of a command line (doctor, clean, watch and run output leaves the host).

`recorder(inner)` is a `RecordingHost` with the trims every snapshot gets (a caller adds
trims of its own commands: `accelhost snapshot` keeps only the UVB poll threads of
`ps -Te`). `redact_text` / `redact_values` apply the same rules where output is made;
matching (engine catalog, `--fail-on-exit`) reads the raw command line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a doctor reads ALLOC_CONF_VARS and records nothing
    from accelhost.host.base import Host
    from accelhost.host.record import CommandFilter, RecordingHost

# The allocator settings the doctor reports; nothing else of an environment is kept.
ALLOC_CONF_VARS = ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")

_SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "credential")
_SECRET_WORD = rf"(?:{'|'.join(_SECRET_WORDS)})"
_SECRET_OPTION = re.compile(rf"^--?[\w.-]*{_SECRET_WORD}[\w.-]*$", re.I)
# Inside one argument (`bash -lc "vllm serve m --api-key K"`, `sh -c 'HF_TOKEN=abc python
# ...'`, `env HF_TOKEN=abc`, a URL's `?token=abc`): an option and its value (after `=` or
# blanks), or a variable assignment; the value is a quoted string or a run of non-blanks.
# A value that is another option (`--no-key-check --port 1`) is not one.
_VALUE = r"(\"[^\"]*\"|'[^']*'|(?!--)[^\s\"']+)"
_INLINE_OPTION = re.compile(rf"(?<![\w.-])(--?[\w.-]*{_SECRET_WORD}[\w.-]*)(=|\s+){_VALUE}", re.I)
_INLINE_ASSIGN = re.compile(rf"(?<![\w.-])((?=\w*{_SECRET_WORD})[A-Za-z_]\w*)={_VALUE}", re.I)
# `scheme://user:password@host`: the password goes, the user stays.
_URL_PASSWORD = re.compile(r"(\w[\w+.-]*://[^\s/@:\"']*):[^\s/@\"']*@")
REDACTED = "<redacted>"


def redact_text(text: str) -> str:
    """Text (one argument, or a whole command line joined by blanks) with the values of the
    secret-looking options and variables in it, and URL passwords, replaced."""
    low = text.lower()  # most output text holds none of the words: no regex work then
    if "://" not in low and not any(w in low for w in _SECRET_WORDS):
        return text
    text = _INLINE_OPTION.sub(lambda m: f"{m[1]}{m[2]}{REDACTED}", text)
    text = _INLINE_ASSIGN.sub(lambda m: f"{m[1]}={REDACTED}", text)
    return _URL_PASSWORD.sub(lambda m: f"{m[1]}:{REDACTED}@", text)


def redact_values(value: Any) -> Any:
    """A JSON-like value with `redact_text` applied to every string in it (keys stay)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: redact_values(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_values(v) for v in value]
    return value


def redact_cmdline(raw: str) -> str:
    """A /proc/PID/cmdline with the values of secret-looking options and variables replaced,
    as separate arguments (`--api-key K`, `--hf-token=K`, `HF_TOKEN=K`) and inside one
    argument that holds a shell command (`bash -lc "vllm serve m --api-key K"`).

    Engine names and titles (what the doctor matches) stay; `--api-key sk-...` does not.
    """
    out: list[str] = []
    hide_next = False
    for arg in raw.split("\0"):
        name, eq, _ = arg.partition("=")
        if hide_next and arg:
            out.append(REDACTED)
            hide_next = False
        elif _SECRET_OPTION.match(name):
            out.append(f"{name}={REDACTED}" if eq else arg)
            hide_next = not eq
        else:
            out.append(redact_text(arg))
            hide_next = False
    return "\0".join(out)


def keep_alloc_vars(environ: str) -> str:
    """What a snapshot keeps of a /proc/PID/environ: the allocator variables, no secrets."""
    return "".join(
        f"{item}\0" for item in environ.split("\0") if item.partition("=")[0] in ALLOC_CONF_VARS
    )


def keep_shared_maps(text: str) -> str:
    """What a snapshot keeps of a /proc/PID/maps: shared file mappings (`rw-s`), the only
    kind a shm_open file is mapped as; libraries and heaps stay out of bug reports."""
    rows = ((line, line.split(None, 5)) for line in text.splitlines())
    return "".join(
        f"{line}\n"
        for line, parts in rows
        if len(parts) == 6 and parts[1].endswith("s") and parts[5].startswith("/")
    )


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

    trims = [
        ("/proc/*/environ", keep_alloc_vars),
        ("/proc/*/cmdline", redact_cmdline),
        ("/proc/*/maps", keep_shared_maps),
    ]
    return RecordingHost(inner, command_filters, trims, http_filter)
