"""Turn a plan into steps: reads the machine, changes nothing, so `--dry-run` prints
exactly what `execute` then carries out."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelhost.apply import DEFAULT_MIGRATE_BUDGET_MS, DEFAULT_STATE_DIR, traps
from accelhost.apply import irq as irqmod
from accelhost.apply.memory import memory_nodes, node_of_cpu
from accelhost.apply.migrate import build_move
from accelhost.apply.steps import (
    ExecCommand,
    ForgetIrqState,
    IrqAffinity,
    IrqBalance,
    MemPolicy,
    OwnAffinity,
    SaveIrqState,
    Step,
    ThreadAffinity,
    Unresolved,
)
from accelhost.apply.threads import RoleMatcher, list_threads, scan_named_threads, thread_steps
from accelhost.cpulist import cpu_mask, format_cpulist, parse_cpu_mask
from accelhost.host.live import live_host
from accelhost.plans import DevicePlan, Plan, ThreadRole
from accelhost.readers.cpus import read_cgroup_cpuset

if TYPE_CHECKING:
    from accelhost.host.base import Host

IRQ_ASCEND_FAMILIES = frozenset({"A2", "A3", "310P"})


@dataclass(frozen=True)
class BindOptions:
    """What to apply and how. `pid` None: no thread or memory steps (`--irq-only`)."""

    pid: int | None = None
    threads: bool = True
    memory: bool = True
    irq: bool = True
    irqbalance: str = "stop"
    host_root: str = "/"
    state_dir: str = DEFAULT_STATE_DIR
    host_threads: bool = True
    membind: bool = False
    migrate_budget_ms: int = DEFAULT_MIGRATE_BUDGET_MS
    allow_foreign: bool = False  # apply a plan made for another host (`--force`)


@dataclass(frozen=True)
class Prepared:
    """The steps, the warnings to give first, and notes. The thread roles and main CPUs
    come along so that threads born while binding are pinned as the first listing was."""

    steps: tuple[Step, ...]
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    roles: tuple[ThreadRole, ...] = ()
    main: tuple[int, ...] = ()


def host_role(plan: Plan) -> ThreadRole | None:
    """950: the host's UVB poll threads as a role; None when the plan pins none."""
    ht = plan.host_threads
    return ThreadRole("host", ht.pattern, ht.cpus) if ht is not None and ht.cpus else None


def roles_of(plan: Plan, dev: DevicePlan) -> list[ThreadRole]:
    """The device's thread roles and (950) the host threads, in the order they win (last)."""
    host = host_role(plan)
    return dev.roles() if host is None else [*dev.roles(), host]


def target_node(dev: DevicePlan, root: str) -> int | None:
    """The node of pool[0]: the plan's `numa_node`, else sysfs."""
    if dev.numa_node is not None:
        return dev.numa_node
    return node_of_cpu(dev.pool[0], root) if dev.pool else None


def build_bind(plan: Plan, device: int, options: BindOptions, host: Host | None = None) -> Prepared:
    """Threads first (they run as soon as pinned), then memory onto their node, then IRQs.
    `host` answers the commands (npu-smi, systemctl); files are read from this machine."""
    live = live_host()
    dev = plan.device(device)
    steps: list[Step] = []
    warnings: list[str] = []
    notes: list[str] = []
    pid = options.pid
    roles = roles_of(plan, dev)
    if pid is not None and options.threads:
        steps += thread_steps(pid, dev.main, roles)
        planned = [*dev.main, *(c for r in roles for c in r.cpus)]
        # What the threads show says more than the environment alone: one warning, not two.
        clobbered = traps.clobber_warnings(pid, planned, live)
        env = traps.process_environ(pid, live)
        warnings += clobbered or traps.omp_warnings(env, f"process {pid}")
        warnings += traps.outside_cpuset_warning(pid, planned, live)
    if options.threads and options.host_threads:
        _extend((steps, warnings), host_thread_steps(live, plan, pid))
    if pid is not None and options.memory:
        steps += _memory_steps(dev, pid, options.host_root, options.migrate_budget_ms)
    if options.irq:
        _extend((steps, warnings, notes), build_irq(plan, dev, options, host))
    return Prepared(tuple(steps), tuple(warnings), tuple(notes), tuple(roles), dev.main)


def _extend(lists: Sequence[list[Any]], parts: Sequence[Sequence[Any]]) -> None:
    """Add each part of a builder's answer (steps, warnings, notes) to its own list."""
    for into, part in zip(lists, parts, strict=True):
        into.extend(part)


def host_thread_steps(
    live: Host, plan: Plan, pid: int | None
) -> tuple[list[ThreadAffinity], list[str]]:
    """950: the host's UVB poll threads, whoever owns them (those of `pid`, the bound
    process, are among its own thread steps already)."""
    role = host_role(plan)
    if role is None:
        return [], []
    found = scan_named_threads(RoleMatcher(role), live)
    steps = [ThreadAffinity(p, t, n, "host", role.cpus) for p, t, n in found if p != pid]
    return steps, traps.host_threads_warning(len(found), role.pattern, live)


def _memory_steps(dev: DevicePlan, pid: int, root: str, budget_ms: int) -> list[Step]:
    nodes = memory_nodes(root)
    node = target_node(dev, root)
    if node is None and len(nodes) > 1:
        why = f"the NUMA node of CPU {dev.pool[0]} is unknown"
        return [Unresolved(f"move pages of process {pid}", why)]
    if node is None:
        node = nodes[0] if nodes else 0
    step = build_move(pid, node, budget_ms, nodes, root)
    if isinstance(step, str):
        return [Unresolved(f"move pages of process {pid} to node {node}", step)]
    return [step]


def device_irqs(
    plan: Plan, dev: DevicePlan, root: str, host: Host | None, live: Host
) -> tuple[list[irqmod.DeviceIrq], str | None]:
    """The device's IRQs with their planned CPUs, or ([], why they cannot be found)."""
    # sysfs names devices in lower case; npu-smi (and so hand-written plans) in upper case.
    pci = (dev.pci or _board_pci(plan, dev, host) or "").strip().lower()
    if not pci:
        why = f"no PCI address for device {dev.device}: the plan has no 'pci'"
        if plan.device_type not in ("nvidia", "pci"):
            why += " and `npu-smi info -t board` gave none"
        return [], why
    ascend = plan.device_type in IRQ_ASCEND_FAMILIES
    try:
        return irqmod.find_irqs(live, root, pci, dev.irq, dev.device, ascend), None
    except irqmod.IrqLookupError as exc:
        return [], str(exc)


def _board_pci(plan: Plan, dev: DevicePlan, host: Host | None) -> str | None:
    """`npu-smi info -t board`'s PCI address (Ascend, or a hand-written plan of no family)."""
    if plan.device_type not in IRQ_ASCEND_FAMILIES | {"unknown", "manual"}:
        return None
    from accelhost.parsers.npusmi import board_command, parse_board_pci

    result = (host or live_host()).run(board_command(dev.device, plan.device_type))
    return parse_board_pci(result.stdout) if result is not None and result.ok else None


def build_irq(
    plan: Plan, dev: DevicePlan, options: BindOptions, host: Host | None
) -> tuple[list[Step], list[str], list[str]]:
    if plan.device_type == "950":
        return [], [], ["[irq] IRQ binding skipped on Ascend 950."]
    if not dev.irq:
        return [], [], []
    root = options.host_root
    live = live_host()
    irqs, problem = device_irqs(plan, dev, root, host, live)
    if problem is not None:
        what = f"bind the IRQs of device {dev.device} to CPUs {format_cpulist(dev.irq)}"
        return [Unresolved(what, problem)], [], []
    steps: list[Step] = []
    warnings = traps.irq_writable_warning(root)
    state = irqmod.state_path(options.state_dir)
    mode = options.irqbalance
    if mode != "keep" and irqmod.is_active(host or live):
        if mode == "stop":
            warnings.append(
                f"{irqmod.SERVICE} is active: stopping it for the whole host so it does "
                "not move the IRQs back (`accelhost unbind --irq` starts it again; "
                "--irqbalance=ban is kinder)"
            )
            steps.append(IrqBalance("stop", state_path=state))
        else:
            cfg = irqmod.config_path(root)
            text = irqmod.banned_config(live.read_file(cfg) or "", dev.irq, [i.irq for i in irqs])
            steps.append(
                IrqBalance("ban", cpus=dev.irq, config_path=cfg, config_text=text, state_path=state)
            )
    elif mode == "keep":
        warnings.append(
            "--irqbalance=keep: if irqbalance runs, it may move these IRQs back within seconds"
        )
    previous = {i.irq: irqmod.read_mask(live, root, i.irq) for i in irqs}
    saved = tuple((n, m) for n, m in previous.items() if m is not None)
    if saved:
        bound = tuple((i.irq, cpu_mask(i.cpus)) for i in irqs)
        steps.append(SaveIrqState(state, dev.device, os.path.abspath(root), saved, bound))
    for i in irqs:
        path = irqmod.affinity_path(root, i.irq)
        steps.append(IrqAffinity(i.irq, i.cpus, cpu_mask(i.cpus), path, i.purpose, previous[i.irq]))
    return steps, warnings, []


def build_exec(
    plan: Plan, device: int, argv: list[str], options: BindOptions, host: Host | None = None
) -> Prepared:
    """IRQ steps, then this process's affinity and memory policy, then execve."""
    dev = plan.device(device)
    steps: list[Step] = []
    warnings = traps.omp_warnings(dict(os.environ), "the command's environment")
    warnings += traps.outside_cpuset_warning(os.getpid(), dev.main)
    notes: list[str] = []
    if options.irq:
        _extend((steps, warnings, notes), build_irq(plan, dev, options, host))
    if dev.main:
        steps.append(OwnAffinity(dev.main))
    if options.memory:
        node = target_node(dev, options.host_root)
        if node is None:
            notes.append(
                f"the NUMA node of CPU {dev.pool[0]} is unknown (no numa_node in the plan, "
                "none in sysfs): memory policy left as default"
            )
        else:
            steps.append(MemPolicy("bind" if options.membind else "preferred", node))
    steps.append(ExecCommand(tuple(argv)))
    return Prepared(tuple(steps), tuple(warnings), tuple(notes))


def build_unbind_irq(
    state_dir: str, device: int | None = None, root: str | None = None, forget: bool = False
) -> Prepared:
    """Put back the masks saved at bind time; restart/restore irqbalance once none remain.

    A saved mask whose host root or IRQ is gone cannot be put back: it becomes a failed
    step that says so (it stays saved: a missing mount may come back), or, with `forget`,
    it is dropped from the state file. A mask set since bind by someone else (or by a reboot
    that gave the IRQ number to another device) is left as it is and forgotten."""
    path = irqmod.state_path(state_dir)
    data = irqmod.load_state(path)
    live = live_host()
    steps: list[Step] = []
    keys = []
    lost: list[tuple[str, str]] = []  # (key, why) of the masks that cannot be restored
    moved: list[tuple[str, str]] = []  # (key, its mask now) of those set since bind
    wanted_root = os.path.abspath(root) if root else None
    for key, rec in sorted(data["irqs"].items(), key=lambda kv: kv[1].get("irq", 0)):
        if device is not None and rec.get("device") != device:
            continue
        if wanted_root is not None and rec.get("root") != wanted_root:
            continue
        irq, mask, rroot = int(rec["irq"]), str(rec["mask"]), str(rec.get("root", "/"))
        what = f"restore IRQ {irq} of device {rec.get('device')}"
        why = irqmod.unrestorable(live, rroot, irq)
        if why is not None:
            lost.append((key, why))
            if not forget:
                hint = "kept in the state file; `unbind --irq --forget` drops it"
                steps.append(Unresolved(f"{what} (mask {mask})", f"{why}: {hint}"))
            continue
        now = irqmod.read_mask(live, rroot, irq)
        if irqmod.set_since_bind(rec, now):
            moved.append((key, f"IRQ {irq} is {now}"))
            continue
        path_of = irqmod.affinity_path(rroot, irq)
        steps.append(IrqAffinity(irq, tuple(parse_cpu_mask(mask)), mask, path_of, what, now, key))
        keys.append(key)
    if keys:
        steps.append(ForgetIrqState(path, tuple(keys)))
    if moved:
        left = f"were set since bind ({', '.join(n for _, n in moved)}): left as they are"
        steps.append(ForgetIrqState(path, tuple(k for k, _ in moved), left))
        keys.extend(k for k, _ in moved)
    if forget and lost:
        whys = "; ".join(dict.fromkeys(why for _, why in lost))
        lost_keys = tuple(k for k, _ in lost)
        steps.append(ForgetIrqState(path, lost_keys, f"cannot be restored ({whys})"))
        keys.extend(k for k, _ in lost)
    ib = data.get("irqbalance")
    if ib and len(keys) == len(data["irqs"]) and ib.get("action") in ("stop", "ban"):
        steps.append(_undo_irqbalance(ib, path, live))
    notes = [] if steps else [f"no saved IRQ masks in {path}: nothing to restore"]
    return Prepared(tuple(steps), (), tuple(notes))


def _undo_irqbalance(ib: dict[str, Any], path: str, host: Host) -> IrqBalance:
    """Start irqbalance again (after `stop`) or put its file back (after `ban`), unless it
    was disabled or masked, or the file edited, since: that is someone's will, left as is."""
    if ib["action"] == "stop":
        now = irqmod.unit_state(host) if ib.get("enabled") else None
        off = irqmod.turned_off_since(ib, now)
        return IrqBalance("leave-stopped" if off else "start", state_path=path)
    cfg: str = ib["config_path"]  # load_state checked it after a ban
    if "written" in ib and host.read_file(cfg) not in ib["written"]:
        return IrqBalance("leave-config", config_path=cfg, state_path=path)
    return IrqBalance("restore", config_path=cfg, config_text=ib.get("original"), state_path=path)


def build_unbind_threads(pid: int) -> Prepared:
    """Give every thread back the whole cgroup cpuset (all online CPUs without one)."""
    live = live_host()
    found = read_cgroup_cpuset(live, pid)
    cpus = found[0] if found is not None else traps.online_cpus(live)
    if cpus is None:
        # No sysfs either: what this process may use. The syscall, not Cpus_allowed_list:
        # it is the mask the kernel enforces for the calling thread, read in one call.
        cpus = tuple(sorted(os.sched_getaffinity(0)))
    steps = tuple(ThreadAffinity(pid, tid, name, "unbind", cpus) for tid, name in list_threads(pid))
    return Prepared(steps)
