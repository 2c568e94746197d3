"""The identity tests use the apply tests' CLI runner and plan-file fixtures."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "apply"))

from apply_helpers import cli, plan_file  # noqa: E402

__all__ = ["cli", "plan_file"]
