"""CPU lists as the kernel writes them (`0-3,8,10-11`) and the masks of /proc/irq.

Kept dependency-free and fast: planners parse a 640-CPU host in well under a millisecond.
"""

from __future__ import annotations

from collections.abc import Iterable

from accelhost.errors import ParseError

# The largest CPU count any Linux build can be configured for (x86-64 and powerpc with
# CONFIG_NR_CPUS=8192); a list naming a CPU at or beyond it is corrupt or hostile, and
# refusing it keeps a bad recording from expanding a hundred million ids into memory.
MAX_CPUS = 8192
# Linux builds for at most 2**10 NUMA nodes (CONFIG_NODES_SHIFT <= 10).
MAX_NODES = 1024
# Every possible CPU id made once: a list of ids is a slice of it, which costs a copy of
# references instead of a new int object per id above 256 (a 640-CPU host parses
# several 640-id lists per plan), and lists of the same ids then compare by identity.
IDS = tuple(range(MAX_CPUS))


def parse_cpulist(
    text: str, source: str = "cpu list", limit: int = MAX_CPUS, what: str = "CPU list"
) -> list[int]:
    """`0-3, 8,10-11` -> [0, 1, 2, 3, 8, 10, 11], in written order (duplicates kept); also
    the kernel's stride form `0-10:2`. Ids and the list's length are bounded by `limit`:
    anything beyond is a ParseError, never a huge allocation."""
    text = text.strip()
    if not text:
        return []
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ParseError(source, f"empty item in {what} {_short(text)}")
        span, colon, stride_text = part.partition(":")
        lo, sep, hi = span.partition("-")
        try:
            a = _nonneg(lo)
            b = _nonneg(hi) if sep else a
            stride = _nonneg(stride_text) if colon else 1
            if a > b or stride < 1 or (colon and not sep):
                raise ValueError
        except ValueError:
            raise ParseError(source, f"not a {what}: {_short(text)}") from None
        if b >= limit:
            raise ParseError(source, f"id {b} in {_short(text)} is beyond the limit of {limit}")
        if len(out) + (b - a) // stride + 1 > limit:
            raise ParseError(source, f"{_short(text)} names more than {limit} ids")
        out.extend(IDS[a : b + 1 : stride] if b < MAX_CPUS else range(a, b + 1, stride))
    return out


def _nonneg(text: str) -> int:
    """A plain decimal number (no sign, no underscores, at most 9 digits)."""
    text = text.strip()
    if not text.isdigit() or not text.isascii() or len(text) > 9:
        raise ValueError(text)
    return int(text)


def _short(text: str, width: int = 60) -> str:
    """A quoted excerpt of a user's or file's text, so that an error stays one line."""
    return repr(text if len(text) <= width else text[:width] + "...")


def format_cpulist(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> `0-2,5,7-8` (sorted, unique); empty -> ``."""
    runs: list[list[int]] = []  # [first, last] of each run of consecutive ids
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def cpu_mask(cpus: Iterable[int]) -> str:
    """The /proc/irq/N/smp_affinity text: CPU 3 -> `00000008`, CPU 35 ->
    `00000008,00000000` (32-bit groups, most significant first)."""
    cpus = set(cpus)
    if not cpus:
        raise ValueError("an IRQ mask needs at least one CPU")
    if min(cpus) < 0:
        raise ValueError(f"negative CPU id {min(cpus)}")
    value = sum(1 << cpu for cpu in cpus)
    groups = max(cpus) // 32 + 1
    return ",".join(f"{(value >> (32 * g)) & 0xFFFFFFFF:08x}" for g in reversed(range(groups)))


def parse_cpu_mask(text: str, source: str = "cpu mask") -> list[int]:
    """`00000008,00000000` -> [35]; the inverse of cpu_mask (any number of groups)."""
    digits = text.strip().replace(",", "")
    if len(digits) > MAX_CPUS // 4:
        raise ParseError(source, f"a CPU mask of more than {MAX_CPUS} bits: {_short(text)}")
    try:
        value = int(digits, 16) if digits else 0
    except ValueError:
        raise ParseError(source, f"not a CPU mask: {_short(text.strip())}") from None
    return [i for i in range(value.bit_length()) if value >> i & 1]


# Accelerator ids: no host has more than this many devices of one kind (an NPU or GPU
# index is a small number; PCI allows 65536 functions per domain, far beyond any box).
MAX_DEVICES = 4096
# Process and thread ids never exceed PID_MAX_LIMIT (2**22 on 64-bit kernels).
MAX_PID = 1 << 22


def parse_id(text: str, source: str, limit: int, what: str = "id") -> int:
    """A plain decimal id below `limit`; anything else (a sign, a non-ASCII digit, a
    thousand digits) is a corrupt or hostile recording, refused with a ParseError."""
    # the common case first, without a call: planners parse hundreds of ids per host
    if len(text) <= 9 and text.isdigit() and text.isascii():
        value = int(text)
    else:
        try:
            value = _nonneg(text)
        except ValueError:
            raise ParseError(source, f"not a {what}: {_short(text.strip())}") from None
    if value >= limit:
        raise ParseError(source, f"{what} {value} is beyond the limit of {limit}")
    return value


def parse_device_list(text: str, source: str = "--device") -> list[int]:
    """`0-3,5` -> [0, 1, 2, 3, 5]: device ids in the CPU-list grammar, unique, written order."""
    ids = parse_cpulist(text, source, limit=MAX_DEVICES, what="device list")
    if not ids:
        raise ParseError(source, "no device id given")
    return list(dict.fromkeys(ids))
