"""The CRI node's two images, made without a registry (tests/e2e/cri_node.py imports them).

- the pause image (`sandbox_image`): the kubelet's pause container only holds the pod's
  namespaces and waits for a signal; any static program that does so serves. It is
  compiled here with `gcc -static` (`make e2e` installs gcc and libc6-dev when missing).
- the engine's image: empty but for /tmp and /root. The container gets the host's system
  folders, Python installation and virtualenv bind-mounted read-only (as the Docker tests'
  containers do), so the same Python and vLLM run inside.
- accelhost's image, as contrib/docker/Dockerfile's is for a DaemonSet: as empty, with the
  same mounts, and an environment in which `accelhost` is on PATH (the virtualenv's bin)
  and imports this tree's src (PYTHONPATH: the virtualenv's editable install may point at
  another checkout, as it does in a worktree).

Both are docker-archive tars (`manifest.json`, the config JSON, one layer tar), the format
`ctr images import` reads; the node imports them into its `k8s.io` namespace, where its
CRI plugin finds them by tag and never tries to pull.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

PAUSE_IMAGE = "localhost/accelhost-e2e/pause:1"
ENGINE_IMAGE = "localhost/accelhost-e2e/engine:1"
ACCELHOST_IMAGE = "localhost/accelhost-e2e/accelhost:1"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# What a pause container must do: nothing, until SIGTERM or SIGINT ends it (the runtime's
# StopPodSandbox sends SIGTERM, then SIGKILL); reap whatever it inherits, as the real one does.
PAUSE_C = r"""
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) {} }

int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
}
"""


@dataclass(frozen=True)
class Entry:
    """One file or folder of a layer."""

    name: str
    mode: int
    data: bytes | None = None  # None: a folder


def _arch() -> str:
    """The image config's architecture, as containerd matches it with this machine."""
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _layer(entries: list[Entry]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry.name)
            info.mode, info.mtime = entry.mode, int(time.time())
            if entry.data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
    return buf.getvalue()


def docker_archive(tag: str, entries: list[Entry], config: dict[str, object]) -> bytes:
    """A docker-archive tar of one layer: what `docker save` writes for a one-layer image."""
    layer = _layer(entries)
    layer_hex = hashlib.sha256(layer).hexdigest()
    image_config = {
        "architecture": _arch(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_hex}"]},
    }
    config_bytes = json.dumps(image_config).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{layer_hex}/layer.tar"]}]
    files = {
        config_name: config_bytes,
        f"{layer_hex}/layer.tar": layer,
        "manifest.json": json.dumps(manifest).encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build_pause(workdir: Path) -> bytes:
    """The pause program, compiled static (it runs in an image with no libc)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise AssertionError("no gcc: `make e2e` installs gcc and libc6-dev when missing")
    source, binary = workdir / "pause.c", workdir / "pause"
    source.write_text(PAUSE_C)
    done = subprocess.run(
        [gcc, "-static", "-O2", "-o", str(binary), str(source)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"gcc -static of the pause program failed:\n{done.stderr}"
    return binary.read_bytes()


def write_images(workdir: Path) -> list[Path]:
    """Both images' tars under `workdir`, ready for `ctr -n k8s.io images import`."""
    pause = docker_archive(
        PAUSE_IMAGE, [Entry("pause", 0o755, build_pause(workdir))], {"Entrypoint": ["/pause"]}
    )
    empty = [Entry("tmp", 0o1777), Entry("root", 0o700)]
    engine = docker_archive(ENGINE_IMAGE, empty, {"Env": [f"PATH={SYSTEM_PATH}"]})
    src = Path(__file__).resolve().parents[2] / "src"
    venv_bin = Path(sys.executable).parent
    accelhost = docker_archive(
        ACCELHOST_IMAGE,
        empty,
        {"Env": [f"PATH={venv_bin}:{SYSTEM_PATH}", f"PYTHONPATH={src}", "HOME=/root"]},
    )
    tars = []
    images = (("pause.tar", pause), ("engine.tar", engine), ("accelhost.tar", accelhost))
    for name, data in images:
        path = workdir / name
        path.write_bytes(data)
        tars.append(path)
    return tars
