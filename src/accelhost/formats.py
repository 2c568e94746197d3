"""The name and version of every JSON document accelhost prints or writes, in one place.

Each document carries its name in a `format` key (`{"format": "accelhost-doctor/1", ...}`)
so that a script or a monitor can tell what it reads and whether it knows that version;
the renderers take the name from here, never spell it themselves. A change that removes
or renames a key, or changes a unit, makes a new version; new keys do not.

Units are the same in every document: bytes for memory and sizes, seconds for times,
CPU and node numbers as integers.
"""

from __future__ import annotations

KIB = 1 << 10  # bytes in a kB as /proc counts them (meminfo, smaps, numa_maps page sizes)
MIB = 1 << 20  # bytes in a MiB (npu-smi's and nvidia-smi's "MB")

PLAN = "accelhost-plan/1"  # `plan --json`, plan files
SNAPSHOT = "accelhost-snapshot/1"  # `snapshot` recordings
TOPO = "accelhost-topo/1"  # `topo --json`
BIND = "accelhost-bind/1"  # `bind`, `exec`, `unbind --json`: the steps and their results
VERIFY = "accelhost-verify/1"  # `verify --json`
DOCTOR = "accelhost-doctor/1"  # `doctor --json`
CLEAN = "accelhost-clean/1"  # `clean --json`
BENCH_BIND = "accelhost-bench-bind/1"  # `bench bind --json`
# `bench pipeline --json` (/2: methods under "methods")
BENCH_PIPELINE = "accelhost-bench-pipeline/2"
IRQ_STATE = "accelhost-irq-state/1"  # the saved IRQ masks (`unbind --irq`)


def mib_bytes(mib: float | None) -> int | None:
    """A device tool's MiB figure as bytes for JSON (None stays None: not known)."""
    return None if mib is None else int(mib * MIB)


def human_bytes(n: int | float) -> str:
    """Bytes for a person: 512 B, 4.0 KiB, 1.5 GiB (the text twin of a JSON byte count)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


# Every document a command prints, by command: what tests check `--json` against.
PRINTED = {
    "plan": PLAN,
    "topo": TOPO,
    "bind": BIND,
    "exec": BIND,
    "unbind": BIND,
    "verify": VERIFY,
    "doctor": DOCTOR,
    "clean": CLEAN,
    "bench bind": BENCH_BIND,
    "bench pipeline": BENCH_PIPELINE,
}
