"""Host hygiene: find and safely remove what crashed engines leave behind.

`read_facts` reads a host (live, snapshot, recording); the checks judge the facts; the
cleaner is the only writer; `watch` repeats it all and exports metrics; `preflight` says
whether an engine will fit before it starts. Heavy parts (metrics) load on first use.
"""

from accelhost.hygiene.checks import CHECK_NAMES, CheckResult, DoctorReport, run_checks
from accelhost.hygiene.facts import HostFacts, read_facts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.preflight import PreflightReport, preflight, preflight_from_facts

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
