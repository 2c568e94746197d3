"""Fixtures of the hygiene tests live in hygiene_lab (a uniquely named module)."""

from hygiene_lab import lab, shm_dir

__all__ = ["lab", "shm_dir"]
