"""Accelerator families and how to tell them from chip names."""

from __future__ import annotations

from collections.abc import Iterable

from accelhost.errors import PlanError

ASCEND_FAMILIES = ("A2", "A3", "310P", "950")
GPU_FAMILIES = ("nvidia", "pci")
FAMILIES = ASCEND_FAMILIES + GPU_FAMILIES


def normalize_family(value: str) -> str:
    """Accept `a3`, `A3`, `310p`, `Nvidia`...; PlanError naming the choices otherwise."""
    found = {family.lower(): family for family in FAMILIES}.get(value.strip().lower())
    if found:
        return found
    raise PlanError(f"unknown device type {value!r} (choose from {', '.join(FAMILIES)})")


def family_from_chip_name(name: str) -> str | None:
    """`910B3` -> A2, `Ascend910` / `910_93..` -> A3, `310P3` -> 310P, `..950..` -> 950;
    `npu-smi info -m` writes `Ascend 910B3`, with a blank."""
    bare = name.strip().upper().removeprefix("ASCEND").strip()
    if "950" in bare:
        return "950"
    if bare.startswith("910B"):
        return "A2"
    if bare.startswith("910_93") or bare in ("910", "910C"):
        return "A3"
    if bare.startswith("310P"):
        return "310P"
    return None


def family_from_chip_names(names: Iterable[str]) -> str | None:
    """The family shared by the chips, when the names tell one (Mcu rows ignored)."""
    found = {f for f in (family_from_chip_name(n) for n in names) if f}
    return found.pop() if len(found) == 1 else None
