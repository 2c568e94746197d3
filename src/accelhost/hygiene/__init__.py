"""Host hygiene: find and safely remove what crashed engines leave behind.

Names load on first use: `accelhost --help` registers these commands without importing
the checks. Data flows one way, one room per step (each room's docstring names its modules):
- `facts/`: one look at a host (`read_facts`), live or recorded alike, through one reader;
- `judge/`: what the facts mean, once per look: every removal rule, the findings handed to
  checks, plan and metrics, and whose each thing is (the `--container` scope);
- `doctor/`: the checks, their evidence and fixes, and the start-up memory preflight;
- `clean/`: what `clean` may do, its plan, order and stops (`accelhost.remove` acts), its journal;
- `watch/`: the doctor on a timer, what it exports, what wakes it at once.
Shared by all: `options` (what to look for), `engines` (the engine catalog, the user's
everywhere), `report` and `render` (what is shown), and `capabilities` (which Linux
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
