"""Accelerator device nodes by name: the one grammar of /dev/davinciN, /dev/nvidiaN, ...

A device node is a node of one device (`node_kind`) or a driver's control node, which
every process of that driver opens: `doctor`'s device holders hold either; `bind --pid`
and `run --bind`, which need the device, look for the first. The number in a node's name
is the host's device id, except for a render node (`renderD128` is the first GPU's), known
only through its PCI address. Also the NVIDIA driver's per-GPU file, which joins a node's
number (the minor) to its PCI address and UUID.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from accelhost.cpulist import MAX_DEVICES

# Kind -> the node's path up to the number in its name.
NODE_PREFIX = {
    "davinci": "/dev/davinci",
    "nvidia": "/dev/nvidia",
    "accel": "/dev/accel/accel",
    "render": "/dev/dri/renderD",
}
_PREFIXES = "|".join(re.escape(p) for p in NODE_PREFIX.values())
_NODE_RE = re.compile(f"^({_PREFIXES})([0-9]{{1,5}})$")
_KIND_OF = {prefix: kind for kind, prefix in NODE_PREFIX.items()}
_ID = re.compile("[0-9]{1,5}")
BUILTIN_NODES = "/dev/davinciN, /dev/nvidiaN, /dev/accel/accelN, /dev/dri/renderD*"
# Nodes every process of a driver opens: they say "uses the driver", not "uses device N".
CONTROL_NODES = frozenset(
    {
        "/dev/davinci_manager",
        "/dev/devmm_svm",
        "/dev/hisi_hdc",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
        "/dev/kfd",
    }
)
# The per-device node kind of each vendor (as `hygiene.devices` names vendors).
VENDOR_KIND = {"ascend": "davinci", "nvidia": "nvidia"}
# Where the kernel says which PCI device a render / accel node belongs to.
_SYSFS_CLASS = {"render": "/sys/class/drm/renderD{n}", "accel": "/sys/class/accel/accel{n}"}


def node_kind(path: str) -> tuple[str, int] | None:
    """(kind, the number in its name) of a device node path; None for any other path,
    control nodes (/dev/nvidiactl, /dev/davinci_manager) included."""
    m = _NODE_RE.match(path)
    if m is None or int(m.group(2)) >= MAX_DEVICES:
        return None
    return _KIND_OF[m.group(1)], int(m.group(2))


def is_device_node(path: str) -> bool:
    """Whether holding `path` open is holding an accelerator (a doctor's device holder): a
    node of one device, or a driver's control node."""
    return path in CONTROL_NODES or node_kind(path) is not None


def device_node(kind: str, number: int) -> str:
    """The path of node `number` of `kind` (`davinci`, `nvidia`, `accel`, `render`)."""
    return f"{NODE_PREFIX[kind]}{number}"


def node_numbers(names: Iterable[str], kind: str) -> list[int]:
    """The numbers of the `kind` nodes among the entries of a /dev listing, ascending."""
    found = (node_kind(f"{NODE_PREFIX[kind].rsplit('/', 1)[0]}/{name}") for name in names)
    return sorted(n for k, n in filter(None, found) if k == kind)


def sysfs_device_link(kind: str, number: int) -> str | None:
    """The sysfs link whose target names the PCI device of a render or accel node."""
    template = _SYSFS_CLASS.get(kind)
    return None if template is None else template.format(n=number) + "/device"


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
        if key == "Device Minor" and _ID.fullmatch(value) and int(value) < MAX_DEVICES:
            minor = int(value)
        elif key == "GPU UUID" and value:
            uuid = value
    return NvidiaGpu(pci.lower(), minor, uuid)
