"""The deployment files, the docs and `--help` agree with one table of capabilities
(`accelhost.hygiene.capabilities`), and with each other (issue 18, point 11).

The files are read as text (no YAML library): the lines that grant capabilities are few
and fixed in form, and a test that parses them cannot be skipped for a missing package.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from accelhost.hygiene.capabilities import (
    CHECK_NEEDS,
    CLEAN_CAPS,
    CLEAN_NEEDS,
    READ_CAPS,
    help_epilog,
)
from accelhost.hygiene.clean.actions import RemoveSegment, RemoveShmFile, StopProcesses
from accelhost.hygiene.report import CHECK_NAMES

ROOT = Path(__file__).resolve().parents[2]
DAEMONSET = (ROOT / "contrib/k8s/daemonset.yaml").read_text()
UNIT = (ROOT / "contrib/systemd/accelhost-watch.service").read_text()
DOCKERFILE = (ROOT / "contrib/docker/Dockerfile").read_text()
DOCS = (ROOT / "docs/hygiene.md").read_text()


def _k8s(names: list[str]) -> set[str]:
    """Kubernetes spells capabilities without the CAP_ prefix."""
    return {f"CAP_{n}" for n in names}


def _quoted(text: str) -> list[str]:
    return re.findall(r'"([A-Z_]+)"', text)


def test_the_table_covers_every_check_and_every_clean_action() -> None:
    assert [n.what for n in CHECK_NEEDS] == list(CHECK_NAMES)
    kinds = [StopProcesses.kind, RemoveSegment.kind, RemoveShmFile.kind]
    assert [n.what for n in CLEAN_NEEDS] == kinds
    assert set(READ_CAPS) == {"CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}
    # IPC_RMID of another user's segment is CAP_SYS_ADMIN's; CAP_IPC_OWNER never suffices
    assert set(CLEAN_CAPS) == {"CAP_KILL", "CAP_FOWNER", "CAP_SYS_ADMIN"}


def test_daemonset_grants_exactly_the_read_capabilities() -> None:
    adds = re.findall(r"^\s*add:\s*\[(.*)\]\s*$", DAEMONSET, re.MULTILINE)
    drops = re.findall(r"^\s*drop:\s*\[(.*)\]\s*$", DAEMONSET, re.MULTILINE)
    assert len(adds) == 1 and drops == ['"ALL"']
    assert _k8s(_quoted(adds[0])) == set(READ_CAPS)
    # what --auto-clean needs for other users' resources is named where it would go
    comments = "\n".join(line for line in DAEMONSET.splitlines() if line.strip().startswith("#"))
    assert _k8s(_quoted(comments)) >= set(CLEAN_CAPS)
    assert "IPC_OWNER" not in DAEMONSET.replace("CAP_IPC_OWNER does not allow it", "")
    assert re.search(r"^\s*privileged:\s*false\s*$", DAEMONSET, re.MULTILINE)


def test_daemonset_may_read_the_hosts_processes_under_apparmor() -> None:
    """The runtime's default AppArmor profile denies reading other profiles' /proc/PID/fd
    and maps whatever the capabilities: without `Unconfined` every shm check on an AppArmor
    node would say "cannot tell"."""
    assert re.search(r"^\s*appArmorProfile:\s*\{type: Unconfined\}\s*$", DAEMONSET, re.M)


def test_daemonset_mounts_the_hosts_dev_shm() -> None:
    """hostIPC shares the IPC namespace (SysV); /dev/shm is a mount: only a hostPath makes
    it the host's on every runtime. Writable: the DaemonSet runs --auto-clean."""
    assert re.search(r"^\s*hostIPC:\s*true\s*$", DAEMONSET, re.MULTILINE)
    assert re.search(
        r"^\s*- \{name: host-shm, mountPath: /dev/shm, readOnly: false\}", DAEMONSET, re.MULTILINE
    )
    volume = re.search(
        r"^\s*- name: host-shm\n\s*hostPath: \{path: /dev/shm, type: Directory\}",
        DAEMONSET,
        re.MULTILINE,
    )
    assert volume is not None
    assert "hostIPC also gives the host's /dev/shm" not in DAEMONSET


def test_systemd_unit_bounds_exactly_the_read_capabilities() -> None:
    (line,) = [x for x in UNIT.splitlines() if x.startswith("CapabilityBoundingSet=")]
    assert set(line.removeprefix("CapabilityBoundingSet=").split()) == set(READ_CAPS)
    assert "AmbientCapabilities=\n" in UNIT
    comments = "\n".join(x for x in UNIT.splitlines() if x.startswith("#"))
    for cap in (*READ_CAPS, *CLEAN_CAPS):
        assert cap in comments, cap
    assert "CAP_IPC_OWNER        " not in UNIT  # no longer granted nor listed as needed


def test_dockerfile_installs_nothing_unused_and_runs_with_the_read_capabilities() -> None:
    assert "apt-get install" not in DOCKERFILE and "apk add" not in DOCKERFILE
    run = " ".join(
        line.lstrip("# ").rstrip("\\ ")
        for line in DOCKERFILE.splitlines()
        if line.startswith("#   ") or line.startswith("#     ")
    )
    assert "--cap-drop=ALL" in run
    assert _k8s(re.findall(r"--cap-add=([A-Z_]+)", run)) == set(READ_CAPS)
    assert "-v /dev/shm:/dev/shm" in run and "--ipc=host" in run and "--pid=host" in run


def test_the_image_must_be_built_and_pushed_first() -> None:
    (image,) = re.findall(r"^\s*image:\s*(\S+)\s*$", DAEMONSET, re.MULTILINE)
    contrib = (ROOT / "contrib/README.md").read_text()
    for text in (contrib, DOCS):
        assert "docker push $REGISTRY/accelhost:0.1.0" in text
        assert image in text  # the placeholder the sed replaces
    assert "docker build -f contrib/docker/Dockerfile" in DOCKERFILE


def markdown_table() -> str:
    """The docs' table, from the one table (docs/hygiene.md embeds exactly this text)."""
    rows = ["| check or clean action | capabilities (as root) | for |", "| --- | --- | --- |"]
    for kind, needs in (("check", CHECK_NEEDS), ("clean", CLEAN_NEEDS)):
        for n in needs:
            caps = ", ".join(f"`{c}`" for c in n.caps) or "none"
            rows.append(f"| {kind} `{n.what}` | {caps} | {n.why} |")
    return "\n".join(rows)


def test_docs_embed_the_table() -> None:
    assert markdown_table() in DOCS
    for cap in (*READ_CAPS, *CLEAN_CAPS):
        assert cap in DOCS


def test_help_says_which_capabilities_each_check_needs() -> None:
    for command in ("doctor", "clean", "watch"):
        res = subprocess.run(
            [sys.executable, "-m", "accelhost", command, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={"COLUMNS": "100", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "src")},
        )
        assert "".join(help_epilog(command).split()) in "".join(res.stdout.split()), command
    assert "CAP_SYS_ADMIN" in help_epilog("clean") and "CAP_SYS_ADMIN" not in help_epilog("doctor")
