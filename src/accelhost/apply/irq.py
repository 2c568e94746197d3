"""Device interrupts: which IRQs belong to a device, their masks, the saved state, and
irqbalance, which, left running, rewrites the masks within seconds.

Every path is under a root (`--host-root`): node agents see the host at /host and tests
use a fake tree. The files are read through the host door: the caller passes a `Host`
(a `LiveHost` when binding) and the path made with `rooted`, so one reader serves both.

The reference stops irqbalance for the whole host and never restarts it. Kinder options:
`ban` adds the reserved CPUs to its own banned list (IRQBALANCE_BANNED_CPULIST, irqbalance
1.8+) and restarts it; `keep` leaves it alone with a warning. `unbind --irq` undoes either.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelhost import formats
from accelhost.cpulist import format_cpulist, parse_cpu_mask, parse_cpulist
from accelhost.errors import ApplyError, ParseError
from accelhost.host.live import live_host

if TYPE_CHECKING:
    from accelhost.host.base import Host

SQ_MARK = "sq_send_trigger_irq"
SERVICE = "irqbalance.service"
_BANNED = re.compile(r'^\s*(?:export\s+)?IRQBALANCE_BANNED_CPULIST\s*=\s*"?([^"#]*)"?')
_ARGS = re.compile(r'^\s*(?:export\s+)?IRQBALANCE_ARGS\s*=\s*"?([^"#]*)"?')


def rooted(root: str, path: str) -> str:
    """`path` (absolute, as on the host) seen under `root`."""
    if not root or root == "/":
        return path
    return os.path.join(root, path.lstrip("/"))


def parse_interrupts(text: str) -> list[tuple[int, str]]:
    """(irq number, whole line) for every numbered line of /proc/interrupts, in file order."""
    out = []
    for line in text.splitlines():
        head, sep, _ = line.partition(":")
        head = head.strip()
        if sep and head.isdigit():
            out.append((int(head), line))
    return out


@dataclass(frozen=True)
class DeviceIrq:
    irq: int
    purpose: str
    cpus: tuple[int, ...]


class IrqLookupError(Exception):
    """The device's IRQs cannot be found; the message says which fact was missing."""


def find_irqs(
    host: Host, root: str, pci: str, irq_cpus: tuple[int, ...], device: int, ascend: bool
) -> list[DeviceIrq]:
    """An Ascend device (`ascend`, or one that shows the SQ interrupt: hand-written plans
    name no family), as vllm-ascend binds it (docs/bind.md, "IRQs"): the SQ IRQ, the first
    `sq_send_trigger_irq` line of /proc/interrupts among its MSI IRQs, gets irq_cpus[0]
    (pool[0]); CQ = SQ + 1 irq_cpus[1] (pool[1]). Another: one CPU per MSI/MSI-X IRQ, round
    robin, so no reserved CPU takes every interrupt."""
    msi_dir = rooted(root, f"/sys/bus/pci/devices/{pci}/msi_irqs")
    names = host.list_dir(msi_dir)
    if names is None:
        raise IrqLookupError(f"no {msi_dir}")
    msi = sorted(int(n) for n in names if n.isdigit())
    text = host.read_file(rooted(root, "/proc/interrupts"))
    wanted = set(msi)
    lines = parse_interrupts(text or "")
    sq = next((irq for irq, line in lines if SQ_MARK in line and irq in wanted), None)
    if not ascend and sq is None:
        if not msi:
            raise IrqLookupError(f"{pci} has no MSI IRQs")
        return [
            DeviceIrq(irq, f"MSI {k} of device {device} ({pci})", (irq_cpus[k % len(irq_cpus)],))
            for k, irq in enumerate(msi)
        ]
    if text is None:
        raise IrqLookupError(f"cannot read {rooted(root, '/proc/interrupts')}")
    if sq is None:
        raise IrqLookupError(f"no '{SQ_MARK}' IRQ of {pci} in /proc/interrupts")
    if sq + 1 not in wanted:  # the next number is another device's (a NIC's, a disk's)
        raise IrqLookupError(f"IRQ {sq + 1} (CQ = SQ {sq} + 1) is not an MSI IRQ of {pci}")
    return [
        DeviceIrq(sq, f"SQ of NPU {device} ({pci})", irq_cpus[:1]),
        DeviceIrq(sq + 1, f"CQ of NPU {device} ({pci})", irq_cpus[1:2] or irq_cpus[:1]),
    ]


def affinity_path(root: str, irq: int) -> str:
    return rooted(root, f"/proc/irq/{irq}/smp_affinity")


def read_mask(host: Host, root: str, irq: int) -> str | None:
    text = host.read_file(affinity_path(root, irq))
    return None if text is None else text.strip()


def write_mask(path: str, mask: str) -> None:
    # One write() of the whole mask (the kernel parses it in one go); O_TRUNC as `echo >`.
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, mask.encode() + b"\n")
    finally:
        os.close(fd)


def unrestorable(host: Host, root: str, irq: int) -> str | None:
    """Why a mask saved for `irq` under `root` cannot be written back, or None when it can
    be tried: the host root is gone (a fake tree deleted, a mount missing), or the IRQ is."""
    if host.list_dir(root or "/") is None:
        return f"host root {root} no longer exists"
    if host.list_dir(rooted(root, f"/proc/irq/{irq}")) is None:
        return f"IRQ {irq} no longer exists (no {rooted(root, f'/proc/irq/{irq}')})"
    return None


def state_path(state_dir: str) -> str:
    return os.path.join(state_dir, "irq-state.json")


def state_key(root: str, irq: int) -> str:
    return f"{os.path.abspath(root or '/')}:{irq}"


def load_state(path: str) -> dict[str, Any]:
    """The saved state; empty when there is none. ApplyError when the file cannot be
    trusted: silently starting afresh would overwrite the only copy of the masks."""
    text = live_host().read_file(path)
    if text is None:
        if os.path.exists(path):
            raise ApplyError(f"cannot read the saved IRQ state {path}")
        return {"format": formats.IRQ_STATE, "irqs": {}, "irqbalance": None}

    def bad(why: str) -> ApplyError:
        return ApplyError(
            f"{path} is not a usable IRQ state file ({why}); the masks it saved are not "
            "restored: fix or move it away"
        )

    try:
        data = json.loads(text)
    except ValueError:
        raise bad("not valid JSON") from None
    if not isinstance(data, dict) or data.get("format") != formats.IRQ_STATE:
        raise bad(f"format is not {formats.IRQ_STATE!r}")
    irqs = data.setdefault("irqs", {})
    ib = data.setdefault("irqbalance", None)
    if not isinstance(irqs, dict) or not all(
        isinstance(r, dict)
        and isinstance(r.get("irq"), int)
        and isinstance(r.get("mask"), str)
        and isinstance(r.get("root", "/"), str)
        and isinstance(r.get("bound", []), list)
        and all(isinstance(m, str) for m in r.get("bound", []))
        for r in irqs.values()
    ):
        raise bad("'irqs' must map keys to records with an integer 'irq' and a 'mask'")
    if ib is not None and (
        not isinstance(ib, dict)
        or (ib.get("action") == "ban" and not isinstance(ib.get("config_path"), str))
        or not isinstance(ib.get("written", []), list)
    ):
        raise bad("'irqbalance' must be null or an object (with 'config_path' after a ban)")
    return data


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves the old or the new file, never half
    of one; an existing file keeps its permission bits."""
    try:
        mode: int | None = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = None
    tmp = f"{path}.accelhost-tmp{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def editing(path: str) -> Iterator[dict[str, Any]]:
    """The saved state for a read-modify-write, stored back (atomically: a crash mid-write
    must not lose the masks to restore) when the block ends. Under an exclusive lock: two
    workers bound at the same time (`exec ... &` twice) must not lose each other's masks."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = load_state(path)
        yield data
        write_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
    finally:
        os.close(fd)  # closing releases the lock


def remember_masks(
    path: str,
    root: str,
    device: int,
    masks: Iterable[tuple[int, str]],
    bound: Iterable[tuple[int, str]] = (),
) -> list[int]:
    """Save masks not saved yet (a second bind must not overwrite the true originals), and
    add the masks about to be written to each IRQ's `bound` list (see `set_since_bind`)."""
    added = []
    with editing(path) as data:
        for irq, mask in masks:
            key = state_key(root, irq)
            if key not in data["irqs"]:
                data["irqs"][key] = {
                    "irq": irq,
                    "root": os.path.abspath(root or "/"),
                    "device": device,
                    "mask": mask,
                    "saved_at": int(time.time()),
                }
                added.append(irq)
        for irq, mask in bound:
            rec = data["irqs"].get(state_key(root, irq))
            if rec is not None and mask not in rec.setdefault("bound", []):
                rec["bound"].append(mask)
    return added


def set_since_bind(record: dict[str, Any], now: str | None) -> bool:
    """Whether an IRQ's mask is now neither the saved one nor one a bind wrote: an operator,
    irqbalance, or a reboot or driver reload that gave the number to another device set it
    since, and writing the saved mask back would undo that. (No `bound`: cannot tell.)"""
    if now is None or "bound" not in record:
        return False
    cpus = set(parse_cpu_mask(now))
    return all(set(parse_cpu_mask(m)) != cpus for m in [record["mask"], *record["bound"]])


def remember_irqbalance(path: str, record: dict[str, Any]) -> None:
    """Keep the first (true) original; a later ban adds its text to the `written` ones, so
    that `unbind --irq` restores the file only while it is one a bind left."""
    with editing(path) as data:
        ib = data["irqbalance"]
        if ib is None:
            data["irqbalance"] = record
        elif "written" in ib and ib.get("config_path") == record.get("config_path"):
            ib["written"] += [t for t in record.get("written", []) if t not in ib["written"]]


def forget(path: str, keys: Iterable[str], irqbalance: bool = False) -> None:
    with editing(path) as data:
        for key in keys:
            data["irqs"].pop(key, None)
        if irqbalance:
            data["irqbalance"] = None


def is_active(host: Host) -> bool:
    """True when systemd says the service runs; no systemd (a container) means not active."""
    result = host.run(["systemctl", "is-active", SERVICE])
    return result is not None and result.ok and result.stdout.strip() == "active"


def unit_state(host: Host) -> str | None:
    """`systemctl is-enabled`'s answer (enabled, disabled, masked...); None: cannot tell.
    Disabled exits 1, so the answer is read whatever the status."""
    result = host.run(["systemctl", "is-enabled", SERVICE])
    return (result.stdout.strip() or None) if result is not None else None


def turned_off_since(record: dict[str, Any], now: str | None) -> bool:
    """Whether irqbalance was disabled or masked after the bind that stopped it: `systemctl
    start` ignores `disable` and would run it against that. (No state at bind: cannot tell.)"""
    was = record.get("enabled")
    return was is not None and now != was and now in ("disabled", "masked", "masked-runtime")


def config_path(root: str) -> str:
    """The distribution's irqbalance environment file (Debian, then Red Hat)."""
    paths = [rooted(root, p) for p in ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance")]
    return next((path for path in paths if os.path.exists(path)), paths[0])


def banned_config(original: str, cpus: Iterable[int], irqs: Iterable[int] = ()) -> str:
    """`original` with `cpus` added to the banned CPUs and `irqs` to the banned IRQs.

    Banning the CPUs keeps other interrupts off the reserved CPUs; banning our IRQs
    (`--banirq` in IRQBALANCE_ARGS) stops irqbalance from moving them off those CPUs.
    Other lines are kept as they are.
    """
    lines = original.splitlines()
    wanted = set(cpus)
    ban_args = [f"--banirq={irq}" for irq in irqs]
    found_cpus = found_args = False
    for i, line in enumerate(lines):
        if (m := _BANNED.match(line)) and not found_cpus:
            with contextlib.suppress(ParseError):
                wanted |= set(parse_cpulist(m.group(1).strip()))
            lines[i] = f'IRQBALANCE_BANNED_CPULIST="{format_cpulist(wanted)}"'
            found_cpus = True
        elif (a := _ARGS.match(line)) and not found_args:
            args = a.group(1).split()
            args += [b for b in ban_args if b not in args]
            lines[i] = f'IRQBALANCE_ARGS="{" ".join(args)}"'
            found_args = True
    if not found_cpus or (ban_args and not found_args):
        lines.append("# added by accelhost bind --irqbalance=ban; undo: accelhost unbind --irq")
    if not found_cpus:
        lines.append(f'IRQBALANCE_BANNED_CPULIST="{format_cpulist(wanted)}"')
    if ban_args and not found_args:
        lines.append(f'IRQBALANCE_ARGS="{" ".join(ban_args)}"')
    return "\n".join(lines) + "\n"
