"""Host hygiene: find and safely remove what crashed engines leave behind.

`read_facts` reads a host (live, snapshot, recording); the checks judge the facts; the
cleaner plans what to remove and has `accelhost.remove` do it; `watch` repeats it all and
exports metrics; `preflight` says whether an engine will fit before it starts. Names load
on first use: `accelhost --help` registers these commands without importing the checks.

Data flows one way, one room per step, each named for what it holds or the command it
serves:
- `facts/`: one look at a host through the host door (`host`: `read_facts`, `HostFacts`),
  the one reader of its processes and shm files for live and recorded hosts alike
  (`rounds`, with `shmstate`, the files a watch keeps between rounds), device memory and
  device-node holders (`devices`), containers, pods and their /dev/shm (`containers`);
- `judge/`: what the facts mean, once per look: every removal rule (`rules`), the findings
  handed to checks, plan and metrics (`findings`), whose each thing is (`attribution`,
  with `containers`: the report named by container, the `--container` scope);
- `doctor/`: the checks (`checks`, `tuning`, `container_init`), their `evidence` and the
  clean command their fixes name, and device memory: who holds it and vLLM's start-up
  memory check done before the start (`preflight`);
- `clean/`: what `clean` may do (`actions`), its plan, order and stops (`cleaner`), its
  `journal`, and why a named target is not acted on (`targets`);
- `watch/`: the doctor on a timer (`watcher`), what it exports (`metrics`), what wakes it
  at once (`react`), what `--auto-clean` keeps, said once (`kept`).
Shared by all: `options` (what to look for), `engines` (the engine catalog, the user's
everywhere), `report`, `render` and `text` (what is shown), and `capabilities` (which Linux
capabilities each check and each clean action needs: the one table the docs, `--help` and
contrib/ are checked against).
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
    "run_checks": "accelhost.hygiene.doctor.checks",
    "HostFacts": "accelhost.hygiene.facts.host",
    "read_facts": "accelhost.hygiene.facts.host",
    "HygieneOptions": "accelhost.hygiene.options",
    "PreflightReport": "accelhost.hygiene.doctor.preflight",
    "preflight": "accelhost.hygiene.doctor.preflight",
    "preflight_from_facts": "accelhost.hygiene.doctor.preflight",
}

if TYPE_CHECKING:
    from accelhost.hygiene.doctor.checks import run_checks
    from accelhost.hygiene.doctor.preflight import PreflightReport, preflight, preflight_from_facts
    from accelhost.hygiene.facts.host import HostFacts, read_facts
    from accelhost.hygiene.options import HygieneOptions
    from accelhost.hygiene.report import CHECK_NAMES, CheckResult, DoctorReport


__getattr__ = lazy_names(__name__, _LAZY)
