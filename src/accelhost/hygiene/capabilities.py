"""Which Linux capabilities each doctor check and each clean action needs: one table.

The docs (docs/hygiene.md, "Capabilities"), `doctor --help` / `clean --help` and the shipped
deployment files (contrib/k8s/daemonset.yaml, contrib/systemd/accelhost-watch.service,
contrib/docker/Dockerfile) are all checked against it (tests/hygiene/test_capabilities.py),
so that they cannot drift from what the code does.

What the kernel asks, as root without other capabilities (facts, verified on Linux 6):
- another process's /proc/PID/fd (listing and links) and environ: CAP_DAC_READ_SEARCH
  (the entries are 0500 / 0400, owned by the process) and CAP_SYS_PTRACE
  (ptrace_may_access, for another user's process or one with capabilities beyond ours);
  /proc/PID/maps: CAP_SYS_PTRACE. /proc/PID/stat, cmdline, status and /proc/sysvipc/shm
  are readable by anyone (unless /proc is mounted with hidepid).
- signalling another user's process: CAP_KILL; unlinking another user's file in the
  sticky /dev/shm: CAP_FOWNER; `shmctl(IPC_RMID)` of a segment whose owner and creator are
  another user: CAP_SYS_ADMIN (CAP_IPC_OWNER does not suffice: it bypasses permission
  checks for IPC_STAT and shmat, not for IPC_RMID).
- root's own processes, files and segments need none of the clean capabilities.
Without the read capabilities the checks say "cannot tell" (UNKNOWN), never "none".
"""

from __future__ import annotations

from dataclasses import dataclass

_READ_OPEN_FILES = ("CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH")


@dataclass(frozen=True)
class CapabilityNeed:
    what: str  # a doctor check, or a clean action (as the journal names it)
    caps: tuple[str, ...]
    why: str


CHECK_NEEDS: tuple[CapabilityNeed, ...] = (
    CapabilityNeed(
        "orphan_engines",
        _READ_OPEN_FILES,
        "the devices each orphan holds (/proc/PID/fd); the judgement itself reads only "
        "/proc/PID/stat and cmdline",
    ),
    CapabilityNeed("device_holders", _READ_OPEN_FILES, "every process's /proc/PID/fd"),
    CapabilityNeed(
        "unattributed_memory", (), "npu-smi / nvidia-smi (the device nodes' file modes)"
    ),
    CapabilityNeed(
        "shared_memory", (), "/proc/sysvipc/shm and /proc/PID/stat are readable by anyone"
    ),
    CapabilityNeed("posix_shm", _READ_OPEN_FILES, "every process's /proc/PID/fd and maps"),
    CapabilityNeed("hugepages", (), "/proc/meminfo and sysfs"),
    CapabilityNeed("preflight", (), "npu-smi / nvidia-smi"),
    CapabilityNeed("host_tuning", _READ_OPEN_FILES, "engines' /proc/PID/environ"),
    CapabilityNeed(
        "container_init",
        ("CAP_SYS_PTRACE",),
        "each container's namespaces (/proc/PID/ns) and /dev/shm (/proc/PID/root); names "
        "need the runtime's socket (root, or its group)",
    ),
)

CLEAN_NEEDS: tuple[CapabilityNeed, ...] = (
    CapabilityNeed("stop", ("CAP_KILL",), "SIGTERM / SIGKILL to another user's orphan"),
    CapabilityNeed(
        "remove_segment",
        ("CAP_SYS_ADMIN",),
        "shmctl(IPC_RMID) of another user's segment (CAP_IPC_OWNER is not enough)",
    ),
    CapabilityNeed(
        "remove_shm_file", ("CAP_FOWNER",), "unlink another user's file in the sticky /dev/shm"
    ),
)


def _union(needs: tuple[CapabilityNeed, ...]) -> tuple[str, ...]:
    return tuple(sorted({c for n in needs for c in n.caps}))


# What `doctor` and `watch` need to see everything; what `clean` and `watch --auto-clean`
# need on top, for other users' processes, files and segments.
READ_CAPS = _union(CHECK_NEEDS)
CLEAN_CAPS = tuple(c for c in _union(CLEAN_NEEDS) if c not in READ_CAPS)


def help_epilog(command: str) -> str:
    """One paragraph for `doctor --help` / `clean --help` / `watch --help`."""
    reads = [n.what for n in CHECK_NEEDS if n.caps]
    text = (
        f"Capabilities: {', '.join(reads)} read other processes' open files, maps or "
        f"environment: {' and '.join(READ_CAPS)} (as root); without them those checks say "
        "UNKNOWN, never 'none'. The other checks need none."
    )
    if command in ("clean", "watch"):
        acts = "; ".join(f"{n.what} {', '.join(n.caps)}" for n in CLEAN_NEEDS)
        text += (
            f" {'--auto-clean' if command == 'watch' else 'clean'} re-checks like the doctor; "
            f"acting on another user's processes, segments or files needs: {acts} "
            "(root's own need none)."
        )
    return text + " Table: docs/hygiene.md, 'Capabilities'."
