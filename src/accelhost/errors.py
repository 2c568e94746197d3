"""Typed errors. The CLI turns an AccelhostError into one line on standard error and a
non-zero exit; anything else is a bug and keeps its traceback."""

from __future__ import annotations


class AccelhostError(Exception):
    """Base of every error a user's input or host can cause."""


class UsageError(AccelhostError):
    """The command line itself is wrong; the CLI exits 2 for it, as argparse does, so that
    scripts can tell "you asked wrongly" (2) from "it could not be done" (1)."""


class SnapshotError(UsageError):
    """A snapshot file that cannot be read (missing, bad JSON, wrong format or types): a
    usage error wherever it is met, since the user named the file, so that every command
    (`plan`, `topo`, `doctor`, ...) answers a missing or bad one alike."""


class ParseError(AccelhostError):
    """A tool's output or a file that cannot be read; the message names the source."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"{source}: {problem}")
        self.source = source
        self.problem = problem


class PlanError(AccelhostError):
    """No plan can be made: a refusal or skip of the binding rules, or an unknown family."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HostError(AccelhostError):
    """The host could not be read (a command timed out, a permission was refused)."""


class ApplyError(AccelhostError):
    """A plan could not be applied (bad plan file, unknown device, process gone)."""


class PlanFileError(UsageError, ApplyError, PlanError):
    """A plan file named by the user that is no plan (unreadable, empty, not JSON, not a
    plan): like a bad snapshot, a usage error on every command line, in one shape for all
    four; still an ApplyError and a PlanError to a library caller that catches those."""


class ForeignPlanError(ApplyError):
    """A plan made for another host. `str()` says every difference (for a library caller
    and its log); `short(flag)` names the first and counts the rest, for one line on a
    terminal (a 16-device plan differs in 18 ways)."""

    def __init__(self, made_for: str, here: str, differences: tuple[str, ...], how: str) -> None:
        self.head = f"the plan was made for another host ({made_for}; this is {here})"
        self.differences = differences
        super().__init__(f"{self.head}: {'; '.join(differences)}; {how}")

    def short(self, how: str) -> str:
        first, rest = self.differences[0], len(self.differences) - 1
        more = f"; and {rest} more difference{'s' if rest > 1 else ''}" if rest else ""
        return f"{self.head}: {first}{more}; {how}"
