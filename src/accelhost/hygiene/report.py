"""The doctor's verdicts: one `CheckResult` per check, one `DoctorReport` per run.

The exit status follows the Node Problem Detector's custom-plugin contract: 0 healthy,
1 a problem on the node, 2 could not tell. A check that was not requested or could not run
is SKIP or UNKNOWN, never OK: a monitor must not read "not looked at" as "healthy".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelhost import formats
from accelhost.host.redact import redact_text, redact_values
from accelhost.hygiene.capabilities import CHECK_NEEDS

OK, WARN, FAIL, UNKNOWN, SKIP = "OK", "WARN", "FAIL", "UNKNOWN", "SKIP"
STATUSES = (OK, WARN, FAIL, UNKNOWN, SKIP)
# How bad, for "the worst finding": a FAIL outranks not knowing, which outranks a WARN.
SEVERITY = {SKIP: 0, OK: 1, WARN: 2, UNKNOWN: 3, FAIL: 4}
# Every check, in the doctor's order: named once, in the capability table.
CHECK_NAMES = tuple(need.what for need in CHECK_NEEDS)


def one_line(text: str, limit: int = 60) -> str:
    """A command line (which can hold a whole `python -c` script) on one row of a table or
    log; JSON output keeps the full command line."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    summary: str
    evidence: tuple[dict[str, Any], ...] = ()
    fix: str = ""

    def __post_init__(self) -> None:
        # A result exists to be shown (a node condition, log collectors): whatever a check
        # put in it from the host (a command line, a container's PID 1) is shown redacted.
        object.__setattr__(self, "summary", redact_text(self.summary))
        object.__setattr__(self, "evidence", tuple(redact_values(list(self.evidence))))
        object.__setattr__(self, "fix", redact_text(self.fix))

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "evidence": list(self.evidence)}


@dataclass(frozen=True)
class DoctorReport:
    checks: tuple[CheckResult, ...] = ()

    @property
    def verdict(self) -> str:
        """FAIL, UNKNOWN, WARN or OK; UNKNOWN when nothing was checked at all."""
        worst = self.worst()
        return UNKNOWN if worst is None else worst.status

    @property
    def exit_code(self) -> int:
        """0 healthy (OK or WARN), 1 a problem (any FAIL), 2 could not tell."""
        return {FAIL: 1, UNKNOWN: 2}.get(self.verdict, 0)

    def worst(self) -> CheckResult | None:
        ran = [c for c in self.checks if c.status != SKIP]
        return max(ran, key=lambda c: SEVERITY[c.status], default=None)

    def brief(self) -> str:
        """One line for a monitor: the verdict, then the worst finding (at most 80 characters)."""
        worst = self.worst()
        if worst is None:
            line = f"{UNKNOWN} no check ran"
        elif self.verdict == OK:
            line = f"{OK} {sum(c.status == OK for c in self.checks)} check(s) OK"
        else:
            line = f"{self.verdict} {worst.name}: {worst.summary}"
        return one_line(line, 80)

    def get(self, name: str) -> CheckResult | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": formats.DOCTOR,
            "status": self.verdict,
            "exit_code": self.exit_code,
            "brief": self.brief(),
            "checks": [c.to_dict() for c in self.checks],
        }
