"""Device memory: will the engine fit (vLLM's own start-up memory check, done before
starting it), and who holds what is in use (the `unattributed_memory` check).

vLLM refuses to start when `free < total x gpu_memory_utilization` on its device and says
so in GiB rounded to two places; the preflight computes the same comparison from the
vendor tool's numbers and, when it fails, names who holds the rest: the processes the
tool lists, the processes that have the device node open, and what nobody accounts for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from accelhost.formats import MIB, mib_bytes
from accelhost.host.base import Host
from accelhost.hygiene.doctor.evidence import clean_command, unknown
from accelhost.hygiene.facts.devices import DeviceMemory
from accelhost.hygiene.facts.host import DEVICE_ERRORS, HostFacts, read_facts
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.report import FAIL, OK, SKIP, WARN, CheckResult
from accelhost.parsers.devnodes import VENDOR_KIND, node_kind


def _gib(mib: float) -> float:
    return round(mib / 1024, 2)  # as vLLM prints it: 64.0, 60.68, 36.75


@dataclass(frozen=True)
class Holder:
    pid: int
    name: str
    memory_mib: int | None
    state: str | None
    source: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "process",
            "pid": self.pid,
            "cmdline": self.name,
            "state": self.state,
            "device_memory_bytes": mib_bytes(self.memory_mib),
            "source": self.source,
        }


@dataclass(frozen=True)
class DevicePreflight:
    device: str
    index: int
    util: float
    free_mib: int
    total_mib: int
    holders: tuple[Holder, ...]
    unattributed_mib: int

    @property
    def requested_mib(self) -> float:
        return self.total_mib * self.util

    @property
    def ok(self) -> bool:
        return self.free_mib >= self.requested_mib

    @property
    def message(self) -> str:
        """vLLM's sentence (on failure) or its mirror image (on success)."""
        free, total, req = _gib(self.free_mib), _gib(self.total_mib), _gib(self.requested_mib)
        if not self.ok:
            return (
                f"Free memory on device ({free}/{total} GiB) on startup is less than desired "
                f"GPU memory utilization ({self.util}, {req} GiB). Decrease GPU memory "
                f"utilization or reduce GPU memory used by other processes."
            )
        return (
            f"Free memory on device ({free}/{total} GiB) covers the desired GPU memory "
            f"utilization ({self.util}, {req} GiB)."
        )

    @property
    def max_util(self) -> float:
        """The largest utilization that would start now (floored to two places)."""
        return int(self.free_mib / self.total_mib * 100) / 100 if self.total_mib else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "device",
            "device": self.device,
            "index": self.index,
            "ok": self.ok,
            "util": self.util,
            "free_bytes": mib_bytes(self.free_mib),
            "total_bytes": mib_bytes(self.total_mib),
            "requested_bytes": mib_bytes(self.requested_mib),
            "unattributed_bytes": mib_bytes(self.unattributed_mib),
            "max_util": self.max_util,
            "message": self.message,
            "holders": [h.to_dict() for h in self.holders],
        }


@dataclass(frozen=True)
class PreflightReport:
    """`status` is OK, FAIL or UNKNOWN (no device memory source, unknown device)."""

    status: str
    util: float
    devices: tuple[DevicePreflight, ...]
    reason: str

    @property
    def ok(self) -> bool:
        return self.status == "OK"


def device_holders_of(dev: DeviceMemory, facts: HostFacts) -> tuple[Holder, ...]:
    """Who holds the device: the vendor tool's process rows, then node openers it missed."""
    procs = facts.processes or {}

    def holder(pid: int, name: str, memory_mib: int | None, source: str) -> Holder:
        p = procs.get(pid)
        return Holder(pid, p.command if p else name, memory_mib, p.state if p else None, source)

    tool = [holder(r.pid, r.name or "?", r.memory_mib, "device tool") for r in dev.processes]
    seen = {h.pid for h in tool}
    opened = [
        holder(pid, "?", None, "open fd")
        for pid, nodes in sorted(facts.device_fds.items())
        if dev.node in nodes and pid not in seen
    ]
    return (*tool, *opened)


def preflight_from_facts(
    facts: HostFacts, util: float, device: int | Sequence[int] | None = None
) -> PreflightReport:
    """The pure preflight over facts already read (every device, one, or a list)."""
    if not facts.device_sources:
        return PreflightReport("UNKNOWN", util, (), "no device memory source (npu-smi, nvidia-smi)")
    wanted = [device] if isinstance(device, int) else list(device or [])
    listed = [d for d in facts.devices if not wanted or d.index in wanted]
    missing = [n for n in wanted if n not in {d.index for d in listed}]
    if missing:
        have = ", ".join(str(d.index) for d in facts.devices) or "none"
        gone = ",".join(map(str, missing))
        why = facts.errors.get("devices") or f"device {gone} not found (have: {have})"
        return PreflightReport("UNKNOWN", util, (), why)
    known = [d for d in listed if d.used_mib is not None and d.total_mib]
    # a device without a memory figure ([N/A]) is not one with room: never "OK"
    blind = [d.label for d in listed if d not in known]
    unread = f"{', '.join(blind)}: the device tool gives no memory figure ([N/A])"
    if not known:
        why = facts.errors.get("devices") or (unread if blind else "no device reports its memory")
        return PreflightReport("UNKNOWN", util, (), why)
    results = []
    for d in known:
        assert d.used_mib is not None and d.total_mib is not None
        holders = device_holders_of(d, facts)
        unheld = max(0, d.used_mib - sum(h.memory_mib or 0 for h in holders))
        free = d.total_mib - d.used_mib
        results.append(DevicePreflight(d.label, d.index, util, free, d.total_mib, holders, unheld))
    failed = [r for r in results if not r.ok]
    if failed:
        first = failed[0]
        return PreflightReport("FAIL", util, tuple(results), f"{first.device}: {first.message}")
    if blind:
        return PreflightReport("UNKNOWN", util, tuple(results), unread)
    one = results[0].message if len(results) == 1 else None
    why = one or f"{len(results)} devices have room for utilization {util}"
    return PreflightReport("OK", util, tuple(results), why)


def preflight(host: Host, util: float, device: int | None = None) -> PreflightReport:
    """Read the host and run the preflight; for `accelhost run --expect-util U --device N`.

    `device` is the device number as the vendor tool counts it (the N of /dev/davinciN or
    /dev/nvidiaN), not an index inside *_VISIBLE_DEVICES; None checks every device.
    """
    opts = HygieneOptions(expect_util=util, device=device)
    return preflight_from_facts(read_facts(host, opts), util, device)


def _shm_space(facts: HostFacts, options: HygieneOptions) -> dict[str, Any] | None:
    """vLLM's words when /dev/shm has less free space than the engine needs (it refuses to
    start with "Insufficient space in /dev/shm ...", vLLM #48879); else None."""
    space = facts.containers.shm_space if facts.containers else None
    if space is None or (free_mib := space.free_bytes // MIB) >= options.shm_need_mib:
        return None
    return {
        "kind": "shm_space",
        "path": "/dev/shm",
        "required_mib": options.shm_need_mib,
        "free_mib": free_mib,
        "total_mib": space.total_bytes // MIB,
        "message": f"Insufficient space in /dev/shm for the engine's shared memory: "
        f"{options.shm_need_mib} MiB required, {free_mib} MiB free. Increase /dev/shm "
        "(e.g. --shm-size or --ipc=host).",
    }


def check_preflight(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    """The device preflight, and /dev/shm's space when the preflight was asked for."""
    result = _device_preflight(facts, options)
    space = None if result.status == SKIP else _shm_space(facts, options)
    if space is None:
        return result
    fix = f"remove leaked files ({clean_command(options, 'shm')}) or increase /dev/shm "
    fix += "(--shm-size, --ipc=host, or a larger emptyDir sizeLimit)"
    summary = space["message"]
    if result.status != OK:
        summary, fix = f"{result.summary}; /dev/shm too small", f"{result.fix}; {fix}"
    evidence = (*result.evidence, space)
    return replace(result, status=FAIL, summary=summary, evidence=evidence, fix=fix)


def _device_preflight(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    name = "preflight"
    if options.expect_util is None:
        return CheckResult(name, SKIP, "not requested (--expect-util U [--device LIST])")
    wanted = options.devices or ([options.device] if options.device is not None else [])
    report = preflight_from_facts(facts, options.expect_util, wanted)
    if report.status == "UNKNOWN":
        return unknown(name, report.reason)
    if report.ok:
        return CheckResult(name, OK, report.reason)
    worst = [d for d in report.devices if not d.ok]
    first = worst[0]
    held = ", ".join(
        f"pid {h.pid} ({h.memory_mib if h.memory_mib is not None else '?'} MiB)"
        for h in first.holders
    )
    summary = (
        f"{first.device} will not start at {first.util}: {_gib(first.free_mib)} of "
        f"{_gib(first.total_mib)} GiB free, {_gib(first.requested_mib)} GiB wanted; "
        f"held by {held or 'no process'}, {first.unattributed_mib} MiB by no listed process"
    )
    if len(worst) > 1:
        summary += f" (and {len(worst) - 1} more device(s))"
    fix = f"free the device ({clean_command(options)} for orphans and leaks) or start with "
    fix += f"--gpu-memory-utilization {min(d.max_util for d in worst)} or lower"
    return CheckResult(name, FAIL, summary, tuple(d.to_dict() for d in worst), fix)


def check_unattributed_memory(facts: HostFacts, options: HygieneOptions) -> CheckResult:
    """Device memory in use beyond what the listed processes hold (and a baseline)."""
    name = "unattributed_memory"
    for source in DEVICE_ERRORS:
        if source in facts.errors:
            return unknown(name, facts.errors[source])
    if not facts.device_sources:
        # nothing was read: no device to check, or one whose tool is missing (an image
        # without npu-smi while engines hold /dev/davinciN): never "accounted for"
        held = sorted({n for ns in facts.device_fds.values() for n in ns if _tool_node(n)})
        if held:
            why = f"{held[0]} is open but no npu-smi or nvidia-smi is installed to read it"
            return unknown(name, why)
        return CheckResult(name, SKIP, "no device memory source (no npu-smi, nvidia-smi)")
    evidence = []
    unaccounted: list[str] = []
    blind: list[str] = []
    for dev in facts.devices:
        # a process row without a memory figure ([N/A]) makes the rest unknowable
        if dev.used_mib is None or any(row.memory_mib is None for row in dev.processes):
            blind.append(dev.label)
            continue
        attributed = sum(row.memory_mib or 0 for row in dev.processes)
        baseline = options.baseline_mib(dev.vendor)
        extra = dev.used_mib - attributed
        if extra > baseline:
            unaccounted.append(f"{dev.label} {extra} MiB")
            evidence.append(
                {
                    "kind": "device",
                    "device": dev.label,
                    "index": dev.index,
                    "used_bytes": mib_bytes(dev.used_mib),
                    "total_bytes": mib_bytes(dev.total_mib),
                    "attributed_bytes": mib_bytes(attributed),
                    "unattributed_bytes": mib_bytes(extra),
                    "baseline_bytes": mib_bytes(baseline),
                    "holders": [h.to_dict() for h in device_holders_of(dev, facts)],
                }
            )
    unread = f"{', '.join(blind)}: the device tool gives no memory figure ([N/A])"
    if not evidence:
        if blind:
            return unknown(name, unread)
        return CheckResult(name, OK, f"{len(facts.devices)} device(s): memory accounted for")
    text = ", ".join(unaccounted)
    summary = f"memory in use by no listed process: {text}" + (f"; {unread}" if blind else "")
    fix = f"look for orphans and leaked segments ({clean_command(options, yes=False)}); if "
    fix += "none, the driver holds it: restart the driver or reset the device when it is idle"
    return CheckResult(name, WARN, summary, tuple(evidence), fix)


def _tool_node(path: str) -> bool:
    """A per-device node of a vendor whose tool reports device memory (/dev/davinciN,
    /dev/nvidiaN; not a render node, which no such tool covers)."""
    kind = node_kind(path)
    return kind is not None and kind[0] in VENDOR_KIND.values()
