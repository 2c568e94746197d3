"""Fixtures of the hygiene tests live in hygiene_lab (a uniquely named module)."""

from hygiene_lab import lab

__all__ = ["lab"]
