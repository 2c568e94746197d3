"""What the hygiene checks look for, in one immutable value passed everywhere.

Built-in device nodes and the engine catalog (engines.py) cover Ascend, NVIDIA and AMD
hosts running vLLM, SGLang, TensorRT-LLM, LMDeploy or MindIE; users add to them (never
replace them), so a site-specific engine name cannot accidentally hide a vLLM orphan.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from accelhost.errors import UsageError
from accelhost.hygiene.engines import Catalog, build_catalog

# The tmpfs dirs shm_open names live in; `--shm-dir` adds to them.
DEFAULT_SHM_DIRS: tuple[str, ...] = ("/dev/shm",)
BUILTIN_DEVICE_GLOBS: tuple[str, ...] = (
    "/dev/davinci*",
    "/dev/davinci_manager",
    "/dev/devmm_svm",
    "/dev/hisi_hdc",
    "/dev/nvidia*",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/kfd",
    "/dev/dri/renderD*",
)
# Shells, and the inits that exit with their one child (`container_init` tells them apart).
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "busybox"})
ONE_CHILD_INITS = frozenset({"tini", "tini-static", "dumb-init", "docker-init", "catatonit"})
# Shells, inits and subreapers: an engine child under one of them was re-parented there
# (or launched by a shell, which a real frontend never is). Their command lines may name
# the engine they started (`bash -lc "vllm serve ..."`): they are still not the engine.
SHELLS_AND_INITS = (
    SHELLS
    | ONE_CHILD_INITS
    | {"init", "systemd", "s6-svscan", "runsvdir", "supervisord", "accelhost"}
    | {"containerd-shim", "containerd-shim-runc-v2", "conmon"}
    | {"nohup", "setsid", "timeout", "sudo", "su"}
)

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

# Device memory a healthy idle device still reports as used (driver, firmware, context).
DEFAULT_IDLE_BASELINE_MIB = {"ascend": 4096, "nvidia": 1024}


@dataclass(frozen=True)
class HygieneOptions:
    device_globs: tuple[str, ...] = ()
    # Extra engine child patterns (`--engine-child`, alias `--engine-pattern`).
    engine_patterns: tuple[str, ...] = ()
    shm_min_age_s: float = 60.0
    expect_util: float | None = None
    device: int | None = None
    devices: tuple[int, ...] = ()
    catalog: Catalog = field(default_factory=build_catalog)
    shm_dirs: tuple[str, ...] = DEFAULT_SHM_DIRS
    idle_baseline_mib: int | None = None
    hugepages_threshold: float = 0.90
    cpus_per_device: int = 5
    # Containers: runtime sockets to ask first (`--docker-socket`), the one container
    # doctor and clean look at (`--container NAME|ID`), and what an engine needs in
    # /dev/shm at start (the preflight; vLLM's two message queues measured 400 MiB).
    container_sockets: tuple[str, ...] = ()
    # CRI endpoints to ask (`--cri-socket`, after CONTAINER_RUNTIME_ENDPOINT), and the
    # kubelet's root directory (`--kubelet-root`; None: /var/lib/kubelet, silent where it
    # is absent) under which pods' emptyDir volumes are found in the mount table
    cri_sockets: tuple[str, ...] = ()
    kubelet_root: str | None = None
    container: str | None = None
    shm_need_mib: int = 400

    def __post_init__(self) -> None:
        if self.engine_patterns:  # build_catalog checks them, as every catalog pattern
            extra = build_catalog(children=self.engine_patterns).engines
            merged = {e.name: e for e in self.catalog.engines}
            for e in extra:
                merged[e.name] = merged[e.name].merged(e) if e.name in merged else e
            object.__setattr__(self, "catalog", Catalog(tuple(merged.values())))
        if self.expect_util is not None and not 0.0 < self.expect_util <= 1.0:
            raise UsageError(
                f"--expect-util {self.expect_util:g}: must be a fraction in (0, 1], like 0.85"
            )
        if self.idle_baseline_mib is not None and self.idle_baseline_mib < 0:
            raise UsageError("--idle-baseline-mib must not be negative")
        if self.shm_min_age_s < 0:
            raise UsageError("--shm-min-age must not be negative")
        if not 0.0 < self.hugepages_threshold <= 1.0:
            raise UsageError("--hugepages-threshold must be a fraction in (0, 1]")

    def is_device_path(self, path: str) -> bool:
        # one regex of every glob, compiled on first use: asked of each open /dev file of
        # every process on the host
        rx = self.__dict__.get("_device_rx")
        if rx is None:
            globs = BUILTIN_DEVICE_GLOBS + self.device_globs
            rx = re.compile("|".join(fnmatch.translate(g) for g in globs))
            object.__setattr__(self, "_device_rx", rx)
        return rx.match(path) is not None

    def baseline_mib(self, vendor: str) -> int:
        if self.idle_baseline_mib is not None:
            return self.idle_baseline_mib
        return DEFAULT_IDLE_BASELINE_MIB.get(vendor, 1024)


def is_control_node(path: str) -> bool:
    return path in CONTROL_NODES
