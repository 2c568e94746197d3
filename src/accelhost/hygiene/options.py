"""What the hygiene checks look for, in one immutable value passed everywhere.

Built-in device nodes and engine patterns cover Ascend, NVIDIA and AMD hosts running vLLM,
SGLang or MindIE; users add to them (never replace them) from the command line, so a
site-specific engine name cannot accidentally hide a vLLM orphan.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from accelhost.errors import AccelhostError

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
BUILTIN_ENGINE_PATTERNS: tuple[str, ...] = ("VLLM::", "vllm", "sglang", "mindie")

# vLLM's child processes retitle themselves; a re-parented one has lost its API server.
CHILD_ENGINE_TITLE = re.compile(r"(?:^|\s)VLLM::(?:EngineCore|Worker)")

# What a container's PID 1 is when it is not the engine itself: shells and inits (their
# command lines may name the engine they started: `bash -lc "vllm serve ..."`).
SHELLS_AND_INITS = frozenset(
    {
        "sh",
        "bash",
        "dash",
        "ash",
        "zsh",
        "ksh",
        "mksh",
        "busybox",
        "init",
        "systemd",
        "tini",
        "tini-static",
        "dumb-init",
        "catatonit",
        "docker-init",
        "s6-svscan",
        "runsvdir",
        "supervisord",
        "accelhost",
    }
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
_ASCEND_NODE = re.compile(r"^/dev/davinci(\d+)$")
_NVIDIA_NODE = re.compile(r"^/dev/nvidia(\d+)$")

# Device memory a healthy idle device still reports as used (driver, firmware, context).
DEFAULT_IDLE_BASELINE_MIB = {"ascend": 4096, "nvidia": 1024}


@dataclass(frozen=True)
class HygieneOptions:
    device_globs: tuple[str, ...] = ()
    engine_patterns: tuple[str, ...] = ()
    shm_min_age_s: float = 60.0
    expect_util: float | None = None
    device: int | None = None
    idle_baseline_mib: int | None = None
    hugepages_threshold: float = 0.90
    cpus_per_device: int = 5
    builtin_engine_patterns: bool = True
    idle_baselines: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_IDLE_BASELINE_MIB))

    def __post_init__(self) -> None:
        for pattern in self.engine_patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise AccelhostError(f"--engine-pattern {pattern!r}: not a regex: {exc}") from None
        if self.expect_util is not None and not 0.0 < self.expect_util <= 1.0:
            raise AccelhostError(
                f"--expect-util {self.expect_util:g}: must be a fraction in (0, 1], like 0.85"
            )
        if self.idle_baseline_mib is not None and self.idle_baseline_mib < 0:
            raise AccelhostError("--idle-baseline-mib must not be negative")
        if self.shm_min_age_s < 0:
            raise AccelhostError("--shm-min-age must not be negative")
        if not 0.0 < self.hugepages_threshold <= 1.0:
            raise AccelhostError("the HugePages threshold must be a fraction in (0, 1]")

    @property
    def all_device_globs(self) -> tuple[str, ...]:
        return BUILTIN_DEVICE_GLOBS + tuple(self.device_globs)

    @property
    def all_engine_patterns(self) -> tuple[str, ...]:
        base = BUILTIN_ENGINE_PATTERNS if self.builtin_engine_patterns else ()
        return base + tuple(self.engine_patterns)

    def engine_regex(self) -> re.Pattern[str] | None:
        patterns = self.all_engine_patterns
        if not patterns:
            return None
        return re.compile("|".join(f"(?:{p})" for p in patterns))

    def is_device_path(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, g) for g in self.all_device_globs)

    def baseline_mib(self, vendor: str) -> int:
        if self.idle_baseline_mib is not None:
            return self.idle_baseline_mib
        return self.idle_baselines.get(vendor, 1024)


def device_of_node(path: str) -> tuple[str, int] | None:
    """`/dev/davinci3` -> ("ascend", 3), `/dev/nvidia1` -> ("nvidia", 1); else None."""
    m = _ASCEND_NODE.match(path)
    if m:
        return ("ascend", int(m.group(1)))
    m = _NVIDIA_NODE.match(path)
    if m:
        return ("nvidia", int(m.group(1)))
    return None


def is_control_node(path: str) -> bool:
    return path in CONTROL_NODES
