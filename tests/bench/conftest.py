"""Fixtures for the bench tests; the helpers live in bench_helpers (a unique module name)."""

from bench_helpers import plan_file

__all__ = ["plan_file"]
