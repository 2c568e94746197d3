"""The `container_init` check: warn before a container's stop leaks its engine's memory.

When PID 1 of a container exits, the kernel kills the rest of its PID namespace at once,
so the engine's helpers die before they unlink their `psm_*` and `sem.mp-*` files; where
/dev/shm outlives the container (`--ipc=host`, a pod's) those stay. A shell, the engine
itself, or an init that exits with its one child all leak (docs/containers.md);
`accelhost run` as PID 1 waits for the whole tree.
"""

from __future__ import annotations

from typing import Any

from accelhost.containers.model import RUNNING, Container
from accelhost.hygiene.doctor.evidence import not_in_recording, unknown
from accelhost.hygiene.judge.attribution import container_json
from accelhost.hygiene.judge.findings import Findings
from accelhost.hygiene.options import ONE_CHILD_INITS, SHELLS, HygieneOptions
from accelhost.hygiene.report import OK, SKIP, WARN, CheckResult

NAME = "container_init"
# Each leaking kind of PID 1: how it is said, and what it cost on this project's machines
# (vLLM 0.32, --ipc=host, Docker 20.10; the table in docs/containers.md).
LEAKS = {
    "shell": (
        "a shell (drops SIGTERM)",
        "measured: `docker stop` took 10.2-10.6 s (SIGTERM dropped, SIGKILL, exit 137) and "
        "left 2 psm_* (240 + 160 MiB apparent) and 1 sem.mp-* in /dev/shm, every time",
    ),
    "engine": (
        "the engine itself",
        "measured: `docker stop` took under 1 s and left the same 2 psm_* and 1 sem.mp-* "
        "in 6 of 7 stops (the helpers die with PID 1)",
    ),
    "init": (
        "an init that exits with its one child",
        "measured: `docker stop` took under 1 s and left the same 2 psm_* and 1 sem.mp-* "
        "in 7 of 10 stops (the init exits with its one child; the kernel kills the helpers)",
    ),
}
POD_COST = (
    "in a shared /dev/shm each crash and restart leaves the old incarnation's files "
    "(measured: 2 psm_*, 410 MB apparent, and 1 sem.mp-*) until the engine cannot start"
)
FIX = (
    'ENTRYPOINT ["accelhost", "run", "--"] (docker run --entrypoint accelhost IMAGE run -- '
    "CMD), or a private IPC namespace (no --ipc=host)"
)
# A pod's fix in Kubernetes' words: its container's command, and the clean of what a
# crashed attempt already left (`--container NAMESPACE/POD` names every attempt).
POD_FIX = (
    'in the pod spec, the engine container\'s command: ["accelhost", "run", "--", '
    "<the engine's command>]; what a crashed attempt left: accelhost clean --container {pods}"
)


def _pod(c: Container) -> str | None:
    """Its pod as `namespace/name`, where the runtime named one."""
    return c.pod.label if c.pod is not None and c.pod.name else None


def _who(c: Container) -> str:
    """A pod's container by its pod, another by its name."""
    pod = _pod(c)
    return f"{pod} ({c.name})" if pod and c.name else pod or c.name or c.short_id


def _in_pod(c: Container) -> bool:
    """A pod's container, also where no CRI runtime answered (its cgroup says kubepods)."""
    return c.pod is not None or c.runtime == "kubernetes"


def _fix(risky: list[Container]) -> str:
    """In the words of where each runs: the pod spec for pods, Docker's flags for others.
    A pod the runtime did not name is cleaned by its container's id."""
    pods = sorted({_pod(c) or c.short_id for c in risky if _in_pod(c)})
    fixes = [POD_FIX.format(pods=" / ".join(pods))] if pods else []
    if not all(_in_pod(c) for c in risky):
        fixes.append(FIX)
    return "; ".join(fixes)


def pid1_kind(command: str | None, options: HygieneOptions) -> str:
    """accelhost run, shell, init, engine or other (unknown: no command seen)."""
    if not command:
        return "unknown"
    bases = [w.rsplit("/", 1)[-1] for w in command.split()]
    for n, b in enumerate(bases):
        if b == "accelhost" and "run" in bases[n + 1 : n + 3]:
            return "accelhost run"
    if bases and bases[0] in ONE_CHILD_INITS:
        return "init"
    if bases and bases[0] in SHELLS:
        return "shell"
    if options.catalog.is_engine(command):
        return "engine"
    return "other"


def _ipc_risk(c: Container, neighbours: list[str]) -> str | None:
    """Why /dev/shm outlives this container's processes (None: it goes with them)."""
    if c.shares_host_ipc or c.ipc_mode == "host":
        return "shares the host's IPC namespace and /dev/shm (--ipc=host)"
    if _in_pod(c):
        return "a pod's IPC namespace and /dev/shm, which outlive a container's restart"
    if c.ipc_mode and c.ipc_mode.startswith("container:"):
        return f"shares the IPC namespace and /dev/shm of {c.ipc_mode[len('container:') :][:12]}"
    if neighbours:  # seen in the namespaces, whatever the runtime calls it
        return f"shares its IPC namespace and /dev/shm with {', '.join(neighbours)}"
    return None


def check_container_init(found: Findings, options: HygieneOptions) -> CheckResult:
    facts, runs_engine = found.facts, found.attribution.runs_engine
    cf = facts.containers
    if facts.processes is None:
        return not_in_recording(facts, NAME)
    if cf is None:
        return unknown(NAME, "containers not read")
    engines = [c for c in cf.view.containers.values() if c.state == RUNNING and runs_engine(c)]
    note = f" ({'; '.join(cf.view.notes)})" if cf.view.notes else ""
    if not engines:
        return CheckResult(NAME, SKIP, f"no container runs an engine{note}")
    evidence: list[dict[str, Any]] = []
    risky: list[Container] = []
    ipc_of: dict[str, set[int]] = {}
    for pid, ns in cf.view.namespaces.items():
        if ns.ipc is not None and pid in cf.view.pid_container:
            ipc_of.setdefault(cf.view.pid_container[pid], set()).add(ns.ipc)
    for c in sorted(engines, key=lambda c: (c.name or "", c.id)):
        kind = pid1_kind(c.pid1_command, options)
        mine = ipc_of.get(c.id, set())
        neighbours = sorted(
            (o.name or o.short_id)
            for o in cf.view.containers.values()
            if o.id != c.id and mine & ipc_of.get(o.id, set())
        )
        risk = _ipc_risk(c, neighbours)
        bad = risk is not None and kind in LEAKS
        item: dict[str, Any] = {
            "kind": "container",
            "container": container_json(c),
            "pid1_command": c.pid1_command,
            "pid1_kind": kind,
            "ipc_mode": c.ipc_mode,
            "shares_host_ipc": c.shares_host_ipc,
            "risky": bad,
        }
        if bad:
            risky.append(c)
            said, cost = LEAKS[kind]
            if not (c.shares_host_ipc or c.ipc_mode == "host"):
                cost = POD_COST
            item["cost"] = cost
            item["detail"] = f"PID 1 is {said}, {risk}: {cost}"
        elif kind == "accelhost run":
            item["detail"] = "PID 1 is accelhost run: the engine's tree is stopped whole"
        elif risk is None:
            item["detail"] = "its /dev/shm goes with it (a private IPC namespace)"
        else:
            item["detail"] = f"PID 1 is {kind}, {risk}: not known to wait for the helpers"
        evidence.append(item)
    if risky:
        names = ", ".join(_who(c) for c in risky)
        summary = f"{len(risky)} engine container(s) whose stop leaks /dev/shm: {names}{note}"
        return CheckResult(NAME, WARN, summary, tuple(evidence), _fix(risky))
    summary = f"{len(engines)} engine container(s), none leaks at stop{note}"
    return CheckResult(NAME, OK, summary, tuple(evidence))
