"""Typed errors: everything a user can cause derives from AccelhostError.

The CLI turns an AccelhostError into one line on standard error and a non-zero exit;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class AccelhostError(Exception):
    """Base of every error a user's input or host can cause."""


class UsageError(AccelhostError):
    """The command line itself is wrong; the CLI exits 2 for it, as argparse does, so that
    scripts can tell "you asked wrongly" (2) from "it could not be done" (1)."""


class SnapshotError(UsageError):
    """A snapshot file that cannot be read: missing, bad JSON, wrong format or types.

    A usage error (exit 2) wherever it is met: the user named the file, so every command
    (`plan`, `topo`, `doctor`, ...) answers a missing or bad one alike.
    """


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


class PlanFileError(UsageError, ApplyError):
    """A plan file named by the user that cannot be read or is not JSON.

    Like a missing snapshot, a usage error (exit 2) on every command line; still an
    ApplyError to a library caller that catches those.
    """
