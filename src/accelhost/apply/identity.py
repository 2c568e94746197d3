"""Which device is a process's: its open device nodes, or (in a worker) its local rank.

Three id spaces meet here (docs/bind.md, "Device ids"): the *host* id (the N of
/dev/davinciN or /dev/nvidiaN, npu-smi's logic id, nvidia-smi's index; what plan keys
are), the *user-visible* id (an entry of ASCEND_RT_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES)
and the *logical* id a framework uses (its position in that list: `npu:R`, `cuda:R`, the
worker's local rank). The rules (`device_of_nodes`, `device_of_rank`) are pure; the
readers below feed them through a Host.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from accelhost.cpulist import MAX_DEVICES
from accelhost.errors import ApplyError, UsageError
from accelhost.family import ASCEND_FAMILIES
from accelhost.host.live import live_host
from accelhost.parsers.devnodes import (
    BUILTIN_NODES,
    VENDOR_KIND,
    NvidiaGpu,
    device_node,
    node_kind,
    node_numbers,
    parse_nvidia_information,
    sysfs_device_link,
)
from accelhost.planner.visible import by_uuid, is_uuid, visible_entries
from accelhost.plans import Plan, load_plan
from accelhost.readers.procs import open_fds

if TYPE_CHECKING:
    from accelhost.host.base import Host

NVIDIA_GPUS = "/proc/driver/nvidia/gpus"
_TRAILING_NUMBER = re.compile("(?<![0-9])[0-9]{1,5}$")


@dataclass(frozen=True)
class Identified:
    """A device id and, in words, how it was found (printed, and in --json)."""

    device: int
    how: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)

    def line(self) -> str:
        return f"device {self.device}: {self.how}"


@dataclass(frozen=True)
class HeldNode:
    """One device node a process holds open; `number` is the id its name gives, if any."""

    path: str
    kind: str
    number: int | None
    pci: str | None = None


def nodes_of_targets(targets: Iterable[str], globs: Sequence[str] = ()) -> list[HeldNode]:
    """The device nodes among a process's fd link targets, each once, in path order.
    A `--device-glob` node's id is the number its name ends with; a render node's number
    (128 + n) is no device id: it is known by its PCI address only."""
    found: list[HeldNode] = []
    for target in sorted(set(targets)):
        kind = node_kind(target)
        if kind is not None:
            name, number = kind
            found.append(HeldNode(target, name, None if name == "render" else number))
            continue
        if any(fnmatch.fnmatchcase(target, glob) for glob in globs):
            m = _TRAILING_NUMBER.search(os.path.basename(target))
            glob_id = int(m.group()) if m and int(m.group()) < MAX_DEVICES else None
            found.append(HeldNode(target, "glob", glob_id))
    return found


def device_of_nodes(
    pid: int, nodes: Sequence[HeldNode], plan_pci: Mapping[str, int] | None = None
) -> Identified:
    """The one device `pid` holds (by the plan's `pci` first, else the node's number);
    UsageError naming what it holds when that is not one."""
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


def device_of_rank(
    env: Mapping[str, str],
    local_rank: int,
    *,
    family: str | None = None,
    namespace_ids: Sequence[int] | None = None,
    uuids: Mapping[str, int] | None = None,
) -> Identified:
    """The host id of the device a worker of `local_rank` uses, as the engines resolve it:
    entry `local_rank` of the visible list, an ordinal among this namespace's device nodes
    (`namespace_ids`: host NPUs 3-7 seen as 0-4 map back to 3-7)."""
    if local_rank < 0:
        raise UsageError(f"local_rank must be 0 or more, got {local_rank}")
    name, entries = visible_entries(env, family)
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
    if is_uuid(entry):
        dev = _uuid_device(entry, uuids, name or "the visible list")
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
        how += f": ordinal {visible} of this namespace's devices is host {ns[visible]}"
        return Identified(ns[visible], how)
    return Identified(visible, how)


def _uuid_device(entry: str, uuids: Mapping[str, int] | None, where: str) -> int:
    if not uuids:
        raise UsageError(
            f"{where} names {entry}, and accelhost cannot map GPU UUIDs to device ids here "
            f"(no {NVIDIA_GPUS}/*/information to read): pass device= instead"
        )
    hits = set(by_uuid(entry, uuids))
    if len(hits) != 1:
        problem = "no GPU" if not hits else "several GPUs"
        raise UsageError(f"{where}: {entry} matches {problem} of this host: pass device=")
    return hits.pop()


def plan_pci(plan: Plan) -> dict[str, int]:
    """PCI address (lower case) -> device id, for the plan devices that carry one."""
    return {d.pci.strip().lower(): d.device for d in plan.devices if d.pci}


def nvidia_gpus(host: Host) -> list[NvidiaGpu]:
    """Every GPU the NVIDIA driver lists, with its minor number and UUID."""
    out = []
    for pci in host.list_dir(NVIDIA_GPUS) or []:
        text = host.read_file(f"{NVIDIA_GPUS}/{pci}/information")
        if text is not None:
            out.append(parse_nvidia_information(pci, text))
    return out


def held_nodes(pid: int, globs: Sequence[str] = (), host: Host | None = None) -> list[HeldNode]:
    """The device nodes `pid` holds open, each with its PCI address where one is known."""
    h = host or live_host()
    minors: dict[int, str] | None = None
    out = []
    for node in nodes_of_targets((open_fds(h, pid) or {}).values(), globs):
        pci: str | None = None
        kind = node_kind(node.path)
        link = sysfs_device_link(*kind) if kind is not None else None
        if link is not None:
            target = h.read_link(link)
            pci = os.path.basename(target).lower() if target else None
        elif node.kind == "nvidia" and node.number is not None:
            if minors is None:
                minors = {g.minor: g.pci for g in nvidia_gpus(h) if g.minor is not None}
            pci = minors.get(node.number)
        out.append(HeldNode(node.path, node.kind, node.number, pci))
    return out


def device_of_pid(
    pid: int, plan: Plan | None = None, globs: Sequence[str] = (), host: Host | None = None
) -> Identified:
    """The one device `pid` holds open; UsageError (exit 2) for none or several."""
    h = host or live_host()
    found = device_of_nodes(pid, held_nodes(pid, globs, h), plan_pci(plan) if plan else None)
    if plan is not None:
        ours = namespace_ids(plan.device_type, h)
        if keyed_by_ordinal(plan, ours) and found.device in ours:
            key = ours.index(found.device)
            how = "the plan numbers this container's NPUs 0, 1, ... as its npu-smi does"
            return Identified(key, f"{found.how}; plan device {key}: {how}")
    return found


def keyed_by_ordinal(plan: Plan, nodes: Sequence[int]) -> bool:
    """Whether an Ascend plan keys this namespace's NPUs by their order, not by the N of
    /dev/davinciN: a plan made in a container that mounts only some NPUs (davinci4 and 5,
    numbered 0 and 1 by npu-smi there). A plan made on the host keys them 4 and 5."""
    if plan.device_type not in ASCEND_FAMILIES or not nodes:
        return False
    keys = {d.device for d in plan.devices}
    return keys == set(range(len(nodes))) and not keys >= set(nodes)


def namespace_ids(family: str | None, host: Host) -> list[int]:
    """Numbers of the device nodes in this namespace's /dev: runtimes mount /dev/davinci3
    as /dev/davinci3, so these are host ids, numbered 0, 1, ... in this order."""
    vendor = "ascend" if family in ASCEND_FAMILIES else family
    kinds = [VENDOR_KIND[vendor]] if vendor in VENDOR_KIND else ["davinci", "nvidia"]
    names = host.list_dir("/dev") or []
    for kind in kinds:
        ids = node_numbers(names, kind)
        if ids:
            return ids
    return []


def device_of_local_rank(
    plan: Plan, local_rank: int, env: Mapping[str, str] | None = None, host: Host | None = None
) -> Identified:
    """The host id (a plan key) of the device worker `local_rank` of this process uses."""
    h = host or live_host()
    gpus = nvidia_gpus(h)
    by_pci = plan_pci(plan)
    uuids = {g.uuid: by_pci.get(g.pci, g.minor) for g in gpus if g.uuid is not None}
    nodes = namespace_ids(plan.device_type, h)
    if keyed_by_ordinal(plan, nodes):
        nodes = []  # an ordinal of this namespace's devices is the plan's key
    found = device_of_rank(
        dict(os.environ) if env is None else env,
        local_rank,
        family=plan.device_type,
        namespace_ids=nodes,
        uuids={k: v for k, v in uuids.items() if v is not None},
    )
    # A node number whose GPU is a plan device by PCI address: the plan's key wins.
    pci = {g.minor: g.pci for g in gpus}.get(found.device)
    if pci is not None and pci in by_pci and by_pci[pci] != found.device:
        dev = by_pci[pci]
        node = device_node("nvidia", found.device)
        return Identified(dev, f"{found.how}; {node} is {pci}, plan device {dev}")
    return found


def device_for_command(pid: int, plan_path: str | None, globs: Sequence[str] = ()) -> Identified:
    """`bind`/`verify --pid P` without --device: the device P holds, joined to the plan
    file's `pci` when it has them (when planning this host, the node's number)."""
    h = live_host()
    if h.list_dir(f"/proc/{pid}") is None:
        raise ApplyError(f"process {pid} does not exist")
    return device_of_pid(pid, load_plan(plan_path) if plan_path else None, globs, h)
