"""The plan: which CPUs each accelerator's worker gets, split into roles.

A `Plan` is plain immutable data. It is what the planner returns, what `plan --json` prints
(format accelhost-plan/1), what `bind --plan FILE` reads back, and what the applier turns
into steps. Vendor-neutral: Ascend fills irq/main/acl/release, GPUs mostly main.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from accelhost.errors import ApplyError, PlanError

PLAN_FORMAT = "accelhost-plan/1"

# Thread-name patterns of the Ascend runtime threads that get their own CPU (the roles
# inside a pool, and how they are applied, in the project's spec for Ascend binding).
ACL_THREAD = "acl_thread"
RELEASE_THREAD = "release_thread"
UVB_THREAD = "uvb_poll_window_thread"


@dataclass(frozen=True)
class ThreadRole:
    """Threads whose name matches `pattern` (a regular expression, searched) go to `cpus`."""

    name: str
    pattern: str
    cpus: tuple[int, ...]


@dataclass(frozen=True)
class DevicePlan:
    """The CPUs of one accelerator's worker. Roles are sub-lists of `pool`."""

    device: int
    pool: tuple[int, ...]
    irq: tuple[int, ...] = ()
    main: tuple[int, ...] = ()
    acl: tuple[int, ...] = ()
    release: tuple[int, ...] = ()
    numa_node: int | None = None
    pci: str | None = None
    thread_roles: tuple[ThreadRole, ...] = ()

    def roles(self) -> list[ThreadRole]:
        """Every named thread role in the order the applier pins them (later wins)."""
        out: list[ThreadRole] = []
        if self.acl:
            out.append(ThreadRole("acl", ACL_THREAD, self.acl))
        if self.release:
            out.append(ThreadRole("release", RELEASE_THREAD, self.release))
        out.extend(self.thread_roles)
        return out

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "pool": list(self.pool),
            "irq": list(self.irq),
            "main": list(self.main),
            "acl": list(self.acl),
            "release": list(self.release),
            "numa_node": self.numa_node,
        }
        if self.pci:
            d["pci"] = self.pci
        if self.thread_roles:
            d["thread_roles"] = {
                r.name: {"pattern": r.pattern, "cpus": list(r.cpus)} for r in self.thread_roles
            }
        return d


@dataclass(frozen=True)
class HostThreads:
    """Host-side threads pinned apart from every worker (Ascend 950 UVB poll threads)."""

    pattern: str
    cpus: tuple[int, ...]
    tids: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "cpus": list(self.cpus), "tids": list(self.tids)}


@dataclass(frozen=True)
class Plan:
    """One host's plan for its visible accelerators."""

    device_type: str
    mode: str
    visible: tuple[int, ...]
    devices: tuple[DevicePlan, ...]
    messages: tuple[str, ...] = ()
    host_threads: HostThreads | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def device(self, index: int) -> DevicePlan:
        """The plan of one device; PlanError naming the planned ones when it is absent."""
        for dev in self.devices:
            if dev.device == index:
                return dev
        have = ", ".join(str(d.device) for d in self.devices) or "none"
        raise PlanError(f"device {index} is not in the plan (planned devices: {have})")

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": PLAN_FORMAT,
            "device_type": self.device_type,
            "mode": self.mode,
            "visible": list(self.visible),
            "devices": {str(dev.device): dev.to_dict() for dev in self.devices},
            "messages": list(self.messages),
        }
        if self.host_threads is not None:
            d["host_threads"] = self.host_threads.to_dict()
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, data: Any, source: str = "plan") -> Plan:
        """Read a plan back (e.g. `bind --plan plan.json`); PlanError on any malformation.

        Hand-written plans may omit everything but `devices` and their `main` (or `pool`).
        """

        def fail(problem: str) -> PlanError:
            return PlanError(f"{source}: {problem}")

        if not isinstance(data, dict):
            raise fail("a plan is a JSON object")
        fmt = data.get("format", PLAN_FORMAT)
        if fmt != PLAN_FORMAT:
            raise fail(f"unsupported format {fmt!r} (expected {PLAN_FORMAT!r})")
        raw_devices = data.get("devices")
        if not isinstance(raw_devices, dict) or not raw_devices:
            raise fail("'devices' must be a non-empty object keyed by device id")
        devices = []
        for key, raw in raw_devices.items():
            try:
                index = int(key)
            except ValueError:
                raise fail(f"device key {key!r} is not an integer") from None
            if not isinstance(raw, dict):
                raise fail(f"device {key} must be an object")
            lists = {
                name: _cpus(raw.get(name, []), f"devices.{key}.{name}", fail)
                for name in ("pool", "irq", "main", "acl", "release")
            }
            if not lists["pool"]:
                lists["pool"] = tuple(
                    dict.fromkeys(lists["irq"] + lists["main"] + lists["acl"] + lists["release"])
                )
            if not lists["main"] and not lists["acl"] and not lists["release"]:
                lists["main"] = lists["pool"]
            if not lists["pool"]:
                raise fail(f"device {key} has no CPUs")
            node = raw.get("numa_node")
            if node is not None and (not isinstance(node, int) or isinstance(node, bool)):
                raise fail(f"devices.{key}.numa_node must be an integer or null")
            pci = raw.get("pci")
            if pci is not None and not isinstance(pci, str):
                raise fail(f"devices.{key}.pci must be a string")
            roles = []
            raw_roles = raw.get("thread_roles", {})
            if not isinstance(raw_roles, dict):
                raise fail(f"devices.{key}.thread_roles must be an object")
            for name, role in raw_roles.items():
                if not isinstance(role, dict) or not isinstance(role.get("pattern"), str):
                    raise fail(f"devices.{key}.thread_roles.{name} needs a 'pattern' string")
                try:
                    re.compile(role["pattern"])
                except re.error as exc:
                    raise fail(
                        f"devices.{key}.thread_roles.{name}: bad pattern {role['pattern']!r}: {exc}"
                    ) from None
                roles.append(
                    ThreadRole(
                        name,
                        role["pattern"],
                        _cpus(role.get("cpus"), f"thread_roles.{name}.cpus", fail),
                    )
                )
            devices.append(
                DevicePlan(
                    device=index,
                    numa_node=node,
                    pci=pci,
                    thread_roles=tuple(roles),
                    **lists,
                )
            )
        devices.sort(key=lambda d: d.device)
        host_threads = None
        raw_ht = data.get("host_threads")
        if raw_ht is not None:
            if not isinstance(raw_ht, dict):
                raise fail("'host_threads' must be an object")
            host_threads = HostThreads(
                pattern=str(raw_ht.get("pattern", UVB_THREAD)),
                cpus=_cpus(raw_ht.get("cpus", []), "host_threads.cpus", fail),
                tids=_cpus(raw_ht.get("tids", []), "host_threads.tids", fail, limit=None),
            )
        visible = data.get("visible", [d.device for d in devices])
        messages = data.get("messages", [])
        if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
            raise fail("'messages' must be a list of strings")
        known = {"format", "device_type", "mode", "visible", "devices", "messages"}
        return cls(
            device_type=str(data.get("device_type", "unknown")),
            mode=str(data.get("mode", "manual")),
            visible=_cpus(visible, "visible", fail),
            devices=tuple(devices),
            messages=tuple(messages),
            host_threads=host_threads,
            extra={k: v for k, v in data.items() if k not in known | {"host_threads"}},
        )


# No kernel configures more CPUs than this (NR_CPUS tops out at 8192 today).
MAX_CPU_ID = 1 << 16


def _cpus(value: Any, where: str, fail: Any, limit: int | None = MAX_CPU_ID) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value
    ):
        raise fail(f"'{where}' must be a list of non-negative integers")
    too_big = [c for c in value if limit is not None and c >= limit]
    if too_big:
        raise fail(f"'{where}' has CPU id {too_big[0]}, beyond any kernel's CPU count")
    return tuple(value)


def numa_node_of(pool: Iterable[int], cpu_node: Mapping[int, int]) -> int | None:
    """The NUMA node of a pool is the node of its first CPU."""
    for cpu in pool:
        return cpu_node.get(cpu)
    return None


def load_plan(plan: Plan | dict[str, Any] | str | os.PathLike[str]) -> Plan:
    """A Plan, its dict form, or the path of a plan JSON file (ApplyError if unreadable).

    Lives beside `Plan` so that every consumer (the worker, the vLLM plugin, device
    identity, `run --bind`) reads plan files one way without importing the applier.
    """
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return Plan.from_dict(plan, "plan")
    import json

    path = os.fspath(plan)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ApplyError(f"cannot read plan file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ApplyError(f"{path}: not valid JSON ({exc})") from None
    return Plan.from_dict(data, path)
