"""Which device is a process's: pure functions over device-node names and environments.

Three id spaces meet here (docs/bind.md, "Device ids"): the *host* id (the N of
/dev/davinciN or /dev/nvidiaN, npu-smi's logic id, nvidia-smi's index; what plan keys
are), the *user-visible* id (an entry of ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)
and the *logical* id a framework uses (its position in that list: `npu:R`, `cuda:R`, the
worker's local rank). The readers that feed these functions live in
`accelhost.apply.identity`; everything here is pure so that every rule is tested on its own.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from accelhost.errors import UsageError

# Node name -> kind. A render node's number (128 + n) is not a device id: it is known
# only through its PCI address.
_NODE_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^/dev/davinci(\d+)$"), "davinci"),
    (re.compile(r"^/dev/nvidia(\d+)$"), "nvidia"),
    (re.compile(r"^/dev/accel/accel(\d+)$"), "accel"),
    (re.compile(r"^/dev/dri/renderD(\d+)$"), "render"),
)
BUILTIN_NODES = "/dev/davinciN, /dev/nvidiaN, /dev/accel/accelN, /dev/dri/renderD*"
_TRAILING_NUMBER = re.compile(r"(\d+)$")


@dataclass(frozen=True)
class HeldNode:
    """One device node a process holds open; `number` is the id its name gives, if any."""

    path: str
    kind: str
    number: int | None
    pci: str | None = None


def nodes_of_targets(targets: Iterable[str], globs: Sequence[str] = ()) -> list[HeldNode]:
    """The device nodes among a process's fd link targets, each once, in path order.

    `globs` (`--device-glob`) name more nodes; their id is the number their name ends with.
    Control nodes every process of a driver opens (/dev/nvidiactl, /dev/davinci_manager)
    name no device and are not matched.
    """
    found: dict[str, HeldNode] = {}
    for target in targets:
        if target in found:
            continue
        node = _node_of(target, globs)
        if node is not None:
            found[target] = node
    return [found[p] for p in sorted(found)]


def _node_of(path: str, globs: Sequence[str]) -> HeldNode | None:
    for pattern, kind in _NODE_KINDS:
        m = pattern.match(path)
        if m:
            return HeldNode(path, kind, None if kind == "render" else int(m.group(1)))
    for glob in globs:
        if fnmatch.fnmatchcase(path, glob):
            m = _TRAILING_NUMBER.search(os.path.basename(path))
            return HeldNode(path, "glob", int(m.group(1)) if m else None)
    return None


@dataclass(frozen=True)
class Identified:
    """A device id and, in words, how it was found (printed, and in --json)."""

    device: int
    how: str

    def to_dict(self) -> dict[str, object]:
        return {"device": self.device, "how": self.how}


def device_of_nodes(
    pid: int, nodes: Sequence[HeldNode], plan_pci: Mapping[str, int] | None = None
) -> Identified:
    """The one device `pid` holds; UsageError naming what it holds when that is not one.

    A node whose PCI address is a plan device's `pci` is that device (the plan's own key,
    whatever the node's number); otherwise the number in the node's name is the host id.
    """
    by_pci = {k.lower(): v for k, v in (plan_pci or {}).items()}
    ids: dict[int, list[str]] = {}
    unknown: list[str] = []
    for node in nodes:
        if node.pci is not None and node.pci.lower() in by_pci:
            dev = by_pci[node.pci.lower()]
            ids.setdefault(dev, []).append(f"{node.path} (PCI {node.pci})")
        elif node.number is not None:
            ids.setdefault(node.number, []).append(node.path)
        else:
            where = f"PCI {node.pci}, in no plan device's 'pci'" if node.pci else "no PCI address"
            unknown.append(f"{node.path} ({where})")
    if len(ids) == 1:
        (dev, paths), *_ = ids.items()
        return Identified(dev, f"process {pid} holds {', '.join(paths)} open")
    if not ids:
        held = f"; it holds {', '.join(unknown)}, which name no device id" if unknown else ""
        raise UsageError(
            f"process {pid} holds no device node ({BUILTIN_NODES}{held}): give --device N, "
            "or --device-glob GLOB for other nodes"
        )
    listed = "; ".join(f"device {d}: {', '.join(p)}" for d, p in sorted(ids.items()))
    raise UsageError(
        f"process {pid} holds several devices ({listed}): give --device N to say which"
    )


# -- inside a worker: local rank -> visible entry -> host id ---------------------------

# Which variable selects the devices a runtime sees, by plan family; for a plan of no
# family (hand-written) the first one set, in this order.
VISIBLE_VARS: dict[str, tuple[str, ...]] = {
    "ascend": ("ASCEND_RT_VISIBLE_DEVICES",),
    "nvidia": ("CUDA_VISIBLE_DEVICES",),
    "any": (
        "ASCEND_RT_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "NEURON_RT_VISIBLE_CORES",
    ),
}


def visible_vars(family: str | None) -> tuple[str, ...]:
    from accelhost.family import ASCEND_FAMILIES

    if family in ASCEND_FAMILIES:
        return VISIBLE_VARS["ascend"]
    if family == "nvidia":
        return VISIBLE_VARS["nvidia"]
    return VISIBLE_VARS["any"]


def parse_visible(name: str, text: str) -> list[str]:
    """Entries of a visible-devices variable; Neuron's `0-3` ranges expanded (bounded)."""
    out: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        m = re.fullmatch(r"(\d+)-(\d+)", entry)
        if m and name == "NEURON_RT_VISIBLE_CORES":
            lo, hi = int(m.group(1)), int(m.group(2))
            if hi < lo or hi - lo > 4096:
                raise UsageError(f"{name}={text}: bad range {entry!r}")
            out.extend(str(i) for i in range(lo, hi + 1))
        else:
            out.append(entry)
    return out


def device_of_rank(
    env: Mapping[str, str],
    local_rank: int,
    *,
    family: str | None = None,
    namespace_ids: Sequence[int] | None = None,
    uuids: Mapping[str, int] | None = None,
) -> Identified:
    """The host id of the device a worker of `local_rank` uses, as the engines resolve it.

    The worker's device is entry `local_rank` of the visible list (`npu:R` / `cuda:R`). An
    entry is an ordinal among the devices this (container) namespace has: with
    `namespace_ids` (the numbers of the device nodes present, which keep their host names)
    entry v is the v-th of them, so host NPUs 3-7 seen as 0-4 map back to 3-7; without,
    the entry is the host id. `GPU-<uuid>` entries are looked up in `uuids` (a unique
    prefix is enough). No variable set: the local rank itself, as an entry.
    """
    if local_rank < 0:
        raise UsageError(f"local_rank must be 0 or more, got {local_rank}")
    name, entries = _visible(env, family)
    if name is None:
        entry = str(local_rank)
        how = f"local rank {local_rank}; no visible-devices variable set"
    else:
        if local_rank >= len(entries):
            raise UsageError(
                f"local rank {local_rank} but {name}={env[name]} lists {len(entries)} devices"
            )
        entry = entries[local_rank]
        how = f"local rank {local_rank} is entry {entry!r} of {name}={env[name]}"
    if entry.upper().startswith("GPU-") or entry.upper().startswith("MIG-"):
        dev = _by_uuid(entry, uuids, name or "the visible list")
        return Identified(dev, f"{how}, which is device {dev} by its UUID")
    if not entry.isdigit():
        raise UsageError(f"{name}: entry {entry!r} is neither an index nor a GPU-<uuid>")
    visible = int(entry)
    ns = sorted(set(namespace_ids or ()))
    if ns and ns != list(range(len(ns))):
        if visible >= len(ns):
            raise UsageError(
                f"{how}, but this namespace has only {len(ns)} devices "
                f"(host ids {', '.join(map(str, ns))})"
            )
        host = ns[visible]
        return Identified(
            host, f"{how}: ordinal {visible} of this namespace's devices is host {host}"
        )
    return Identified(visible, how)


def _visible(env: Mapping[str, str], family: str | None) -> tuple[str | None, list[str]]:
    for name in visible_vars(family):
        value = env.get(name)
        if value is not None and value.strip():
            if name == "HIP_VISIBLE_DEVICES" and env.get("ROCR_VISIBLE_DEVICES", "").strip():
                return _hip_over_rocr(env)
            return name, parse_visible(name, value)
    return None, []


def _hip_over_rocr(env: Mapping[str, str]) -> tuple[str, list[str]]:
    """ROCm applies ROCR_VISIBLE_DEVICES first, then HIP_VISIBLE_DEVICES indexes into it."""
    rocr = parse_visible("ROCR_VISIBLE_DEVICES", env["ROCR_VISIBLE_DEVICES"])
    hip = parse_visible("HIP_VISIBLE_DEVICES", env["HIP_VISIBLE_DEVICES"])
    out = []
    for h in hip:
        if not h.isdigit() or int(h) >= len(rocr):
            raise UsageError(
                f"HIP_VISIBLE_DEVICES entry {h!r} is not an index into "
                f"ROCR_VISIBLE_DEVICES={env['ROCR_VISIBLE_DEVICES']}"
            )
        out.append(rocr[int(h)])
    return "HIP_VISIBLE_DEVICES", out


def _by_uuid(entry: str, uuids: Mapping[str, int] | None, where: str) -> int:
    if not uuids:
        raise UsageError(
            f"{where} names {entry}, and accelhost cannot map GPU UUIDs to device ids here "
            "(no /proc/driver/nvidia/gpus/*/information to read): pass device= instead"
        )
    wanted = entry.lower()
    hits = {dev for uuid, dev in uuids.items() if uuid.lower().startswith(wanted)}
    if len(hits) != 1:
        problem = "no GPU" if not hits else "several GPUs"
        raise UsageError(f"{where}: {entry} matches {problem} of this host: pass device=")
    return hits.pop()


@dataclass(frozen=True)
class NvidiaGpu:
    """What /proc/driver/nvidia/gpus/<pci>/information says about one GPU."""

    pci: str
    minor: int | None
    uuid: str | None


def parse_nvidia_information(pci: str, text: str) -> NvidiaGpu:
    """`Device Minor: 3` and `GPU UUID: GPU-...` lines; absent fields are None."""
    minor: int | None = None
    uuid: str | None = None
    for line in text.splitlines()[:64]:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "Device Minor" and value.isdigit():
            minor = int(value)
        elif key == "GPU UUID" and value:
            uuid = value
    return NvidiaGpu(pci.lower(), minor, uuid)
