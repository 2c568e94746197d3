"""Fixtures for the apply tests; the helpers live in apply_helpers (a unique module name)."""

from apply_helpers import cli, fake_tree, plan_file, spawn

__all__ = ["cli", "fake_tree", "plan_file", "spawn"]
