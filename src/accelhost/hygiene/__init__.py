"""Host hygiene: find and safely remove what crashed engines leave behind.

`read_facts` reads a host (live, snapshot, recording); the checks judge the facts; the
cleaner plans what to remove and has `accelhost.remove` do it; `watch` repeats it all and
exports metrics; `preflight` says whether an engine will fit before it starts. Names load
on first use: `accelhost --help` registers these commands without importing the checks.

What lives where: `options` (what to look for), `facts` (read once through the host
door) with `devices` (device memory from npu-smi / nvidia-smi, and who has a device node
open), `engines` (the engine catalog: frontends and children), `rules` (every rule of what
is an orphan and what leaked: segments and /dev/shm files), `findings` (what the rules
find in one reading, judged once for the checks, the plan and the metrics),
`attribution` (one round's "whose is this": a process's container, a leftover's
`LeftBy`), `checks`, `posix_check` (the /dev/shm check), `tuning`, `device_preflight` (the
verdicts), `evidence`, `report`, `render` and `text` (what is shown), `actions`,
`cleaner`, `stopper` and `journal` (what `clean` does), `targets` (why a target named on
`clean`'s command line is not acted on), `watch` (the loop), `watch_metrics` (what it
exports, its own cost included), `incremental` (the one reader of processes and shm
files, under `read_facts`: a live host's round reads only what changed, others everything),
`react` (process events and inotify that start a round at once),
`capabilities` (which Linux capabilities each check and each clean action needs: the one
table the docs, `--help` and contrib/ are checked against). Containers:
`container_facts` (read with the facts: the runtimes' view, each container's own /dev/shm,
/dev/shm's free space, logind's RemoveIPC), `container_evidence` (every finding named by
its container in the report; `--container` scoping; what a watch remembers to tell it),
`container_init` (the check), `shm_preflight` (/dev/shm space and RemoveIPC).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelhost import lazy_names

__all__ = [
    "CHECK_NAMES",
    "CheckResult",
    "DoctorReport",
    "HostFacts",
    "HygieneOptions",
    "PreflightReport",
    "preflight",
    "preflight_from_facts",
    "read_facts",
    "run_checks",
]

_LAZY = {
    "CHECK_NAMES": "accelhost.hygiene.report",
    "CheckResult": "accelhost.hygiene.report",
    "DoctorReport": "accelhost.hygiene.report",
    "run_checks": "accelhost.hygiene.checks",
    "HostFacts": "accelhost.hygiene.facts",
    "read_facts": "accelhost.hygiene.facts",
    "HygieneOptions": "accelhost.hygiene.options",
    "PreflightReport": "accelhost.hygiene.device_preflight",
    "preflight": "accelhost.hygiene.device_preflight",
    "preflight_from_facts": "accelhost.hygiene.device_preflight",
}

if TYPE_CHECKING:
    from accelhost.hygiene.checks import run_checks
    from accelhost.hygiene.device_preflight import PreflightReport, preflight, preflight_from_facts
    from accelhost.hygiene.facts import HostFacts, read_facts
    from accelhost.hygiene.options import HygieneOptions
    from accelhost.hygiene.report import CHECK_NAMES, CheckResult, DoctorReport


__getattr__ = lazy_names(__name__, _LAZY)
