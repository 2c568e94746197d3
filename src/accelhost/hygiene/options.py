"""What the hygiene checks look for, in one immutable value passed everywhere.

The device nodes (`parsers.devnodes`, the grammar `bind` and `run` use too) and the engine
catalog (engines.py) cover Ascend, NVIDIA and AMD hosts running vLLM, SGLang,
TensorRT-LLM, LMDeploy or MindIE; users add to them (never replace them), so a
site-specific engine name cannot accidentally hide a vLLM orphan.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field
from functools import cached_property

from accelhost.errors import UsageError
from accelhost.hygiene.engines import Catalog, build_catalog
from accelhost.parsers.devnodes import is_device_node

# The tmpfs dirs shm_open names live in; `--shm-dir` adds to them.
DEFAULT_SHM_DIRS: tuple[str, ...] = ("/dev/shm",)
# How long a segment must be idle, a file unchanged, to count as leaked (`--shm-min-age`).
DEFAULT_SHM_MIN_AGE_S = 60.0
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

# Device memory a healthy idle device still reports as used (driver, firmware, context).
DEFAULT_IDLE_BASELINE_MIB = {"ascend": 4096, "nvidia": 1024}


@dataclass(frozen=True)
class HygieneOptions:
    # Paths that are device nodes besides `devnodes`' (`--device-glob`).
    device_globs: tuple[str, ...] = ()
    shm_min_age_s: float = DEFAULT_SHM_MIN_AGE_S
    expect_util: float | None = None
    device: int | None = None
    devices: tuple[int, ...] = ()
    # The built-in engines with the site's own (`--engine-catalog`, `--engine-child`, ...)
    catalog: Catalog = field(default_factory=build_catalog)
    # The command-line words that added to `catalog` (`--engine-catalog FILE`, ...): a fix
    # the doctor prints repeats them, or its clean would judge by another catalog
    catalog_words: tuple[str, ...] = ()
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

    @cached_property
    def _glob_rx(self) -> re.Pattern[str] | None:
        # one regex of every glob, compiled once: asked of each open file of every process
        globs = self.device_globs
        return re.compile("|".join(map(fnmatch.translate, globs))) if globs else None

    def is_device_path(self, path: str) -> bool:
        rx = self._glob_rx
        return is_device_node(path) or (rx is not None and rx.match(path) is not None)

    def baseline_mib(self, vendor: str) -> int:
        if self.idle_baseline_mib is not None:
            return self.idle_baseline_mib
        return DEFAULT_IDLE_BASELINE_MIB.get(vendor, 1024)
