"""CPU lists as the kernel writes them (`0-3,8,10-11`) and the masks of /proc/irq.

Kept dependency-free and fast: planners parse a 640-CPU host in well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Iterable

from accelhost.errors import ParseError


def parse_cpulist(text: str, source: str = "cpu list") -> list[int]:
    """`0-3, 8,10-11` -> [0, 1, 2, 3, 8, 10, 11], in written order (duplicates kept).

    Whitespace after commas is allowed, as in `Cpus_allowed_list` of some kernels.
    An empty or blank text is the empty list.
    """
    text = text.strip()
    if not text:
        return []
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ParseError(source, f"empty item in CPU list {text!r}")
        lo, sep, hi = part.partition("-")
        try:
            if sep:
                a, b = int(lo), int(hi)
                if a > b or a < 0:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                a = int(lo)
                if a < 0:
                    raise ValueError
                out.append(a)
        except ValueError:
            raise ParseError(source, f"not a CPU list: {text!r}") from None
    return out


def is_cpulist(text: str) -> bool:
    """True when `text` is a non-empty CPU list (used to recognise table columns)."""
    try:
        return bool(parse_cpulist(text))
    except ParseError:
        return False


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> `0-2,5,7-8` (sorted, unique); empty -> ``."""
    ordered = sorted(set(cpus))
    if not ordered:
        return ""
    parts: list[str] = []
    start = prev = ordered[0]
    for cpu in ordered[1:]:
        if cpu == prev + 1:
            prev = cpu
            continue
        parts.append(f"{start}-{prev}" if prev != start else str(start))
        start = prev = cpu
    parts.append(f"{start}-{prev}" if prev != start else str(start))
    return ",".join(parts)


def cpu_mask(cpus: Iterable[int]) -> str:
    """The /proc/irq/N/smp_affinity text for a set of CPUs.

    32-bit groups of 8 hex digits, most significant first, separated by commas, with no
    leading all-zero groups beyond those needed to reach the highest CPU:
    CPU 3 -> `00000008`, CPU 8 -> `00000100`, CPU 35 -> `00000008,00000000`.
    """
    cpus = list(cpus)
    if not cpus:
        raise ValueError("an IRQ mask needs at least one CPU")
    value = 0
    for cpu in cpus:
        if cpu < 0:
            raise ValueError(f"negative CPU id {cpu}")
        value |= 1 << cpu
    groups = max(cpus) // 32 + 1
    return ",".join(f"{(value >> (32 * g)) & 0xFFFFFFFF:08x}" for g in reversed(range(groups)))


def parse_cpu_mask(text: str, source: str = "cpu mask") -> list[int]:
    """`00000008,00000000` -> [35]; the inverse of cpu_mask (any number of groups)."""
    digits = text.strip().replace(",", "")
    try:
        value = int(digits, 16) if digits else 0
    except ValueError:
        raise ParseError(source, f"not a CPU mask: {text.strip()!r}") from None
    return [i for i in range(value.bit_length()) if value >> i & 1]
