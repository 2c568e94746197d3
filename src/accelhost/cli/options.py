"""Every option more than one command takes, defined once (pip's `cmdoptions` shape).

A command composes its parser from these functions instead of writing `add_argument`
again: an option then has one spelling, one type, one default and one meaning
everywhere, and a test (tests/test_cli_options.py) fails when a literal such as `--pid`
is passed to `add_argument` twice anywhere in `accelhost.cli`. Where a command uses an
option for a narrower purpose, it passes `context`: a few words put in front of the one
help text, never a second meaning. Options only one command has stay with that command.

This module imports only argparse and the vocabulary: `accelhost CMD --help` builds its
parser through it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

from accelhost.errors import ParseError, PlanError
from accelhost.remove import DEFAULT_GRACE_S

# What takes options: a parser or one of its argument groups.
Parser = argparse.ArgumentParser | argparse._ArgumentGroup

HOST_ROOT_HELP = (
    "prefix of every /proc and /sys path of the IRQ and memory steps (node agents see the "
    "host at /host)"
)
FORCE_HELP = (
    "a --plan made for another host (one whose CPUs, NUMA nodes or devices are not this "
    "host's; refused without it)"
)
MEMBIND_HELP = "strict: allocate only on the device's node (default: prefer it)"


def _help(context: str, text: str) -> str:
    return f"{context}: {text}" if context else text


def whole(minimum: int) -> Callable[[str], int]:
    """argparse type: a whole number of at least `minimum` (a count, a byte threshold);
    anything else is a usage error, never silently clamped."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def seconds(text: str) -> float:
    """argparse type: a duration in seconds, finite and not negative."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def device_ids(text: str) -> list[int]:
    """argparse type for --device: `0-3,5` -> [0, 1, 2, 3, 5]; a usage error otherwise."""
    from accelhost.cpulist import parse_device_list

    try:
        return parse_device_list(text)
    except ParseError as exc:
        raise argparse.ArgumentTypeError(exc.problem) from None


def device(p: Parser, context: str, one: bool = False) -> None:
    """`--device LIST` (alias `--devices`), always a list (one shape in every command): a
    command taking one device (`one`: its help offers no list) checks with `common.one_device`.
    Ids are the host's: the `npu-smi info` / `nvidia-smi` index, the N of /dev/davinciN or
    /dev/nvidiaN."""
    ids = "host ids, as npu-smi / nvidia-smi number them and plan keys are; " + (
        "one here, e.g. 3" if one else "e.g. 0-3,5"
    )
    p.add_argument(
        "--device", "--devices", type=device_ids, metavar="LIST", help=f"{context} ({ids})"
    )


def device_type_arg(text: str) -> str:
    """argparse type for --device-type: a family name in any case; a usage error otherwise."""
    from accelhost.family import normalize_family

    try:
        return normalize_family(text)
    except PlanError as exc:
        raise argparse.ArgumentTypeError(exc.reason) from None


def device_type(p: Parser) -> None:
    from accelhost.family import FAMILIES

    p.add_argument(
        "--device-type",
        metavar="TYPE",
        type=device_type_arg,
        help=f"accelerator family: {', '.join(FAMILIES)} (default: detected)",
    )


def json_output(p: Parser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON for machines")


def snapshot(p: Parser, note: str = "") -> None:
    p.add_argument(
        "--snapshot",
        metavar="FILE",
        help="replay a recorded host instead of reading this one (a file from "
        "`accelhost snapshot`, or example:NAME for a bundled one)" + (f"; {note}" if note else ""),
    )


def grace(p: Parser, what: str) -> None:
    p.add_argument(
        "--grace",
        type=seconds,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help=f"how long {what} may take to stop after SIGTERM before SIGKILL "
        f"(default {DEFAULT_GRACE_S:g})",
    )


def pid(p: Parser, context: str, *, repeatable: bool = False) -> None:
    more: dict[str, Any] = {"action": "append", "default": []} if repeatable else {}
    text = f"{context} (repeatable)" if repeatable else context
    p.add_argument("--pid", type=int, metavar="PID", help=text, **more)


def dry_run(p: Parser) -> None:
    p.add_argument("--dry-run", action="store_true", help="print the steps, change and run nothing")


def plan_file(p: Parser, context: str) -> None:
    p.add_argument(
        "--plan",
        metavar="FILE",
        help=f"{context}; a file from `accelhost plan --json` (or hand-written)",
    )


def force(p: Parser, verb: str = "apply") -> None:
    """`--force`: bind, exec and run --bind apply (verify checks against) a plan made for
    another host; `verb` says which, in the command's own words."""
    p.add_argument("--force", action="store_true", help=f"{verb} {FORCE_HELP}")


def no_irq(p: Parser, what: str) -> None:
    """`--no-irq`; `what` says what the command then leaves undone with the IRQs."""
    p.add_argument("--no-irq", action="store_true", help=f"leave the device's IRQs out: {what}")


def no_memory(p: Parser, what: str) -> None:
    """`--no-memory`; `what` says what the command then leaves undone with memory."""
    p.add_argument("--no-memory", action="store_true", help=f"leave memory alone: {what}")


def membind(p: Parser) -> None:
    p.add_argument("--membind", action="store_true", help=MEMBIND_HELP)


def host_root(p: Parser, context: str = "") -> None:
    # No default here: `bind_options` reads a missing root as "/", and unbind filters by
    # it only when given.
    p.add_argument("--host-root", metavar="DIR", help=_help(context, HOST_ROOT_HELP))


def state_dir(p: Parser) -> None:
    from accelhost.apply import DEFAULT_STATE_DIR

    p.add_argument(
        "--state-dir",
        metavar="DIR",
        help=f"where IRQ masks are saved for `unbind --irq` (default {DEFAULT_STATE_DIR})",
    )


def device_glob(p: Parser) -> None:
    """One meaning for bind, verify and the hygiene commands: these files are device nodes,
    numbered (where a command needs the device's id) by the number their name ends with."""
    p.add_argument(
        "--device-glob",
        action="append",
        default=[],
        metavar="GLOB",
        help="also treat open files matching GLOB as device nodes, the number their name ends with "
        "being the device id (repeatable; adds to the built-in ones: /dev/davinciN, /dev/nvidiaN, "
        "/dev/accel/accelN, /dev/dri/renderD*, the drivers' control nodes such as /dev/nvidiactl)",
    )


def expect_util(p: Parser, context: str) -> None:
    p.add_argument(
        "--expect-util",
        type=float,
        metavar="U",
        help=_help(
            context,
            "U is vLLM's --gpu-memory-utilization; an engine starts when U x total device "
            "memory is free (vLLM's check)",
        ),
    )


def journal(p: Parser) -> None:
    from accelhost.hygiene.clean.journal import DEFAULT_JOURNAL

    p.add_argument(
        "--journal",
        default=DEFAULT_JOURNAL,
        metavar="FILE",
        help="JSON-lines journal of what clean does, one line per action before it is "
        f"taken (default {DEFAULT_JOURNAL})",
    )


def thread_role(p: Parser, context: str = "") -> None:
    """Parsed in the handler by the planner's one role parser (`common.thread_roles`), so a
    bad spec is a UsageError (exit 2) with the same words in every command."""
    from accelhost.planner.roles import ROLE_HELP, ROLE_METAVAR

    p.add_argument(
        "--thread-role",
        action="append",
        default=[],
        metavar=ROLE_METAVAR,
        help=_help(context, ROLE_HELP),
    )


def pci(p: Parser) -> None:
    p.add_argument(
        "--pci",
        metavar="ADDRS",
        help="the accelerators are these PCI devices, read from sysfs only (comma-separated "
        "addresses)",
    )


def planning(p: Parser) -> None:
    """The options that shape a plan: `plan`'s own, and bind/exec/verify's without --plan."""
    p.add_argument(
        "--strategy",
        help="Ascend: global_slice, topo_affinity, cluster (default by family); "
        "GPU: exclusive (default), node, socket, core-complex",
    )
    pci(p)
    p.add_argument(
        "--numa-from",
        choices=["numa_node", "local_cpulist"],
        default="numa_node",
        help="where each device's NUMA node comes from: numa_node (sysfs; -1 means node 0, "
        "as torchrun) or local_cpulist (the node holding most of its local CPUs; use it for "
        "-1 nodes and GPUs on CPU-less memory nodes)",
    )
    p.add_argument(
        "--reserve-irq",
        type=int,
        default=0,
        metavar="K",
        help="reserve the first K CPUs of each pool for the device's MSI-X IRQs",
    )


def cri_socket(p: Parser) -> None:
    p.add_argument(
        "--cri-socket",
        action="append",
        default=[],
        metavar="ENDPOINT",
        help="ask the CRI runtime (Kubernetes' gRPC API) on this unix socket for pods and "
        "containers, PATH or unix://PATH (repeatable; after CONTAINER_RUNTIME_ENDPOINT, before "
        "containerd's, CRI-O's and cri-dockerd's usual sockets; one second each at most)",
    )


def kubelet_root(p: Parser) -> None:
    p.add_argument(
        "--kubelet-root",
        metavar="DIR",
        help="the kubelet's --root-dir, under which pods' emptyDir volumes are mounted (default "
        "/var/lib/kubelet, unsaid where absent; in a DaemonSet, where its hostPath is mounted)",
    )
