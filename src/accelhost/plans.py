"""The plan: which CPUs each accelerator's worker gets, split into roles.

Plain immutable data: what the planner returns, `plan --json` prints (accelhost-plan/1),
`bind --plan FILE` reads back and the applier turns into steps.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from accelhost import formats
from accelhost.errors import PlanError, PlanFileError

if TYPE_CHECKING:
    from accelhost.host.base import Host


def read_hostname(host: Host) -> str | None:
    """The host's name as a plan records it (None: it has none to read)."""
    return (host.read_file("/proc/sys/kernel/hostname") or "").strip() or None


# A device plan's CPU lists, in the order its JSON gives them.
_CPU_LISTS = ("pool", "irq", "main", "acl", "release")
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
        ascend = (  # the Ascend runtime threads that get their own CPU
            ThreadRole("acl", "acl_thread", self.acl),
            ThreadRole("release", "release_thread", self.release),
        )
        return [role for role in ascend if role.cpus] + list(self.thread_roles)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {name: list(getattr(self, name)) for name in _CPU_LISTS}
        d["numa_node"] = self.numa_node
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
class PlannedHost:
    """The host a plan was made for, so that applying it elsewhere is refused
    (`accelhost.apply.driver`): another machine's CPU ids mean other CPUs here."""

    hostname: str | None
    allowed_cpus: tuple[int, ...]
    numa_nodes: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()}


@dataclass(frozen=True)
class Plan:
    """One host's plan for its visible accelerators.

    `worker_skipped` is the reason the reference skipped the worker part (Ascend 950:
    "NPU topo affinity not found. action: skip worker CPU binding." and the like); such a
    plan has no devices and still carries `host_threads`, which the reference pins before,
    and whatever becomes of, its worker plan."""

    device_type: str
    mode: str
    visible: tuple[int, ...]
    devices: tuple[DevicePlan, ...]
    messages: tuple[str, ...] = ()
    host_threads: HostThreads | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    host: PlannedHost | None = None
    worker_skipped: str | None = None

    def device(self, index: int) -> DevicePlan:
        """The plan of one device; PlanError naming the planned ones when it is absent."""
        found = next((dev for dev in self.devices if dev.device == index), None)
        if found is not None:
            return found
        have = ", ".join(str(d.device) for d in self.devices) or "none"
        why = f"; worker CPU binding skipped: {self.worker_skipped}" if self.worker_skipped else ""
        raise PlanError(f"device {index} is not in the plan (planned devices: {have}{why})")

    def worker_skip(self, index: int) -> str | None:
        """Why device `index` has no worker CPUs although the plan is for it (only the host
        threads are planned), or None: a planned device, or one the plan is not for."""
        planned = any(dev.device == index for dev in self.devices)
        return None if planned or index not in self.visible else self.worker_skipped

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": formats.PLAN,
            "device_type": self.device_type,
            "mode": self.mode,
            "visible": list(self.visible),
            "devices": {str(dev.device): dev.to_dict() for dev in self.devices},
            "messages": list(self.messages),
        }
        if self.worker_skipped is not None:
            d["worker_skipped"] = self.worker_skipped
        if self.host_threads is not None:
            d["host_threads"] = self.host_threads.to_dict()
        if self.host is not None:
            d["host"] = self.host.to_dict()
        d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, data: Any, source: str = "plan") -> Plan:
        """Read a plan back; PlanError "SOURCE: problem" on any malformation. Hand-written
        plans may omit everything but `devices` and their `main` (or `pool`)."""
        r = _Reader(source)
        if not isinstance(data, dict):
            raise r.fail("a plan is a JSON object")
        fmt = data.get("format", formats.PLAN)
        if fmt != formats.PLAN:
            raise r.fail(f"unsupported format {fmt!r} (expected {formats.PLAN!r})")
        skipped = data.get("worker_skipped")
        if skipped is not None and (not isinstance(skipped, str) or not skipped.strip()):
            raise r.fail("'worker_skipped' must be a non-empty string (why no worker is planned)")
        raw_devices = data.get("devices")
        if not isinstance(raw_devices, dict) or not (raw_devices or skipped):
            raise r.fail("'devices' must be a non-empty object keyed by device id")
        devices = sorted((r.device(k, v) for k, v in raw_devices.items()), key=lambda d: d.device)
        messages = data.get("messages", [])
        if not isinstance(messages, list) or not all(isinstance(m, str) for m in messages):
            raise r.fail("'messages' must be a list of strings")
        ht, host = data.get("host_threads"), data.get("host")
        host_threads = None if ht is None else r.host_threads(ht)
        visible = r.cpus(data.get("visible", [d.device for d in devices]), "visible")
        if not devices and (host_threads is None or not host_threads.cpus or not visible):
            raise r.fail(
                "a plan whose worker part was skipped ('worker_skipped', no devices) needs "
                "'host_threads' CPUs (it has nothing else to apply) and 'visible' (the "
                "devices it is for)"
            )
        return cls(
            device_type=str(data.get("device_type", "unknown")),
            mode=str(data.get("mode", "manual")),
            visible=visible,
            devices=tuple(devices),
            messages=tuple(messages),
            host_threads=host_threads,
            extra={k: v for k, v in data.items() if k not in _KNOWN},
            host=None if host is None else r.host(host),
            worker_skipped=skipped,
        )


# Every key `Plan.to_dict` writes itself; any other is kept as it is in `Plan.extra`.
_KNOWN = {"format", *(f.name for f in fields(Plan))} - {"extra"}
# No kernel configures more CPUs than this (NR_CPUS tops out at 8192 today).
MAX_CPU_ID = 1 << 16


@dataclass(frozen=True)
class _Reader:
    """The checks of `Plan.from_dict`, each failing with "SOURCE: what is wrong"."""

    source: str

    def fail(self, problem: str) -> PlanError:
        return PlanError(f"{self.source}: {problem}")

    def obj(self, value: Any, what: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{what} must be an object")
        return value

    def cpus(self, value: Any, where: str, limit: int | None = MAX_CPU_ID) -> tuple[int, ...]:
        if not isinstance(value, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in value
        ):
            raise self.fail(f"'{where}' must be a list of non-negative integers")
        too_big = [c for c in value if limit is not None and c >= limit]
        if too_big:
            raise self.fail(f"'{where}' has CPU id {too_big[0]}, beyond any kernel's CPU count")
        return tuple(value)

    def device(self, key: str, raw: Any) -> DevicePlan:
        try:
            index = int(key)
        except ValueError:
            raise self.fail(f"device key {key!r} is not an integer") from None
        raw = self.obj(raw, f"device {key}")
        lists = {n: self.cpus(raw.get(n, []), f"devices.{key}.{n}") for n in _CPU_LISTS}
        if not lists["pool"]:
            lists["pool"] = tuple(dict.fromkeys(c for n in _CPU_LISTS[1:] for c in lists[n]))
        if not (lists["main"] or lists["acl"] or lists["release"]):
            lists["main"] = lists["pool"]
        if not lists["pool"]:
            raise self.fail(f"device {key} has no CPUs")
        node, pci = raw.get("numa_node"), raw.get("pci")
        if node is not None and (not isinstance(node, int) or isinstance(node, bool)):
            raise self.fail(f"devices.{key}.numa_node must be an integer or null")
        if pci is not None and not isinstance(pci, str):
            raise self.fail(f"devices.{key}.pci must be a string")
        roles = self.obj(raw.get("thread_roles", {}), f"devices.{key}.thread_roles")
        return DevicePlan(
            device=index,
            numa_node=node,
            pci=pci,
            thread_roles=tuple(self.role(f"devices.{key}", n, v) for n, v in roles.items()),
            **lists,
        )

    def role(self, where: str, name: str, raw: Any) -> ThreadRole:
        pattern = raw.get("pattern") if isinstance(raw, dict) else None
        where = f"{where}.thread_roles.{name}"
        if not isinstance(pattern, str):
            raise self.fail(f"{where} needs a 'pattern' string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise self.fail(f"{where}: bad pattern {pattern!r}: {exc}") from None
        return ThreadRole(name, pattern, self.cpus(raw.get("cpus"), f"thread_roles.{name}.cpus"))

    def host_threads(self, raw: Any) -> HostThreads:
        """Host threads are pinned whichever process owns them: a pattern that also matches
        an ordinary name ("", ".", "a|") would pin every thread on the host."""
        raw = self.obj(raw, "'host_threads'")
        pattern = str(raw.get("pattern", UVB_THREAD))
        try:
            broad = any(re.search(pattern, name) for name in ("", "systemd", "kthreadd"))
        except re.error as exc:
            raise self.fail(f"host_threads: bad pattern {pattern!r}: {exc}") from None
        if broad:
            raise self.fail(f"host_threads.pattern {pattern!r} would pin every process's threads")
        return HostThreads(
            pattern=pattern,
            cpus=self.cpus(raw.get("cpus", []), "host_threads.cpus"),
            tids=self.cpus(raw.get("tids", []), "host_threads.tids", limit=None),
        )

    def host(self, raw: Any) -> PlannedHost:
        raw = self.obj(raw, "'host'")
        name = raw.get("hostname")
        if name is not None and not isinstance(name, str):
            raise self.fail("host.hostname must be a string or null")
        return PlannedHost(
            hostname=name,
            allowed_cpus=self.cpus(raw.get("allowed_cpus", []), "host.allowed_cpus"),
            numa_nodes=self.cpus(raw.get("numa_nodes", []), "host.numa_nodes"),
        )


def load_plan(plan: Plan | dict[str, Any] | str | os.PathLike[str]) -> Plan:
    """A Plan, its dict form, or the path of a plan JSON file; here so that every consumer
    reads plan files one way without importing the applier. A file that is no plan
    (unreadable, empty, not JSON, not a plan) is one PlanFileError naming the file."""
    if isinstance(plan, Plan):
        return plan
    if isinstance(plan, dict):
        return Plan.from_dict(plan, "plan")
    import json

    path = os.fspath(plan)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise PlanFileError(f"cannot read plan file {path}: {exc.strerror}") from None
    except ValueError as exc:  # not UTF-8
        raise PlanFileError(f"{path}: not a plan file ({exc})") from None
    if not text.strip():
        # what `accelhost plan --json > plan.json` leaves when planning failed
        raise PlanFileError(f"{path}: empty file: did `accelhost plan` fail?")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PlanFileError(f"{path}: not valid JSON ({exc})") from None
    if isinstance(data, dict) and "devices" not in data and data.get("exit_code"):
        # the error document `accelhost plan --json` prints when it cannot plan
        raise PlanFileError(
            f"{path}: `accelhost plan` failed when it wrote this file "
            f"(exit {data['exit_code']}): {data.get('reason', 'no reason given')}"
        )
    try:
        return Plan.from_dict(data, path)
    except PlanError as exc:
        raise PlanFileError(exc.reason) from None
