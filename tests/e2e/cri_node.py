"""A Kubernetes node's pod machinery of the suite's own: containerd with its CRI plugin.

There is no kubelet here; `cri_pod.py` plays its part through the CRI API. This module
starts and stops the runtime (the facts it relies on: ../shared/spec/kubernetes.md):

- Debian's containerd (1.6, the CRI plugin built in), with the config from `containerd
  config default` changed only where it must be: its root, state, gRPC socket and
  `opt` folder under one private `/tmp/ah-cri-*` folder (short, for unix socket paths);
  `restrict_oom_score_adj = true` (these machines lack CAP_SYS_RESOURCE: without it every
  sandbox fails); `sandbox_image` the local pause image; the `native` snapshotter (any
  filesystem, and the images are tiny). cgroupfs driver (the default: `SystemdCgroup =
  false`), as the kubelet's cgroup parents `/kubepods/<qos>/pod<uid>` need.
- containerd 1.6's shims put their sockets under /run/containerd/s, whatever the state
  folder, and runc keeps its state under /run/containerd/runc: the host's own containerd
  (if any) lives there. So containerd runs in a mount namespace of its own where /run is
  a private tmpfs. The private folder and the kubelet root are bind-mounted on themselves
  and made shared first, so that mounts go both ways there as on a real node: the emptyDir
  tmpfs the test mounts on the host is seen by containerd, and the sandboxes' shm mounts
  containerd makes are in the host's mount table.
- images: cri_images.py, imported with `ctr -n k8s.io images import`.

Safety: only processes whose command line names the private folder (containerd, its
shims) and those in the cgroups of pods this node made are ever signalled, recorded with
their start times. `Node.close()` (the fixture's finally) stops and removes every pod,
stops containerd, unmounts everything under both folders, removes the cgroups it created
and the folders.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from cri_images import PAUSE_IMAGE, write_images
from docker_daemon import _mount_points_under, _pids_naming
from procs import Tracked, wait_for

START_TIMEOUT_S = 60.0
INSTALL_HINT = "`make e2e` installs Debian's docker.io (containerd, runc) and gcc when missing"
CGROUP_FS = Path("/sys/fs/cgroup")


def _tool(name: str) -> str:
    found = shutil.which(name) or next(
        (f"{d}/{name}" for d in ("/usr/sbin", "/usr/bin") if os.access(f"{d}/{name}", os.X_OK)),
        None,
    )
    if found is None:
        raise AssertionError(f"no {name} on this machine: {INSTALL_HINT}")
    return found


def _set(text: str, section: str, key: str, value: str) -> str:
    """`key = value` in `[section]` of containerd's default config (its own lines, not a
    TOML parser: the default is flat and stable); fails if the key is not there once."""
    head = re.search(rf"^\s*\[{re.escape(section)}\]\s*$", text, re.M)
    assert head, f"containerd's default config has no [{section}]"
    nxt = re.compile(r"^\s*\[", re.M).search(text, head.end())
    end = nxt.start() if nxt else len(text)
    body, count = re.subn(rf"^(\s*){re.escape(key)} = .*$", rf"\g<1>{key} = {value}",
                          text[head.end() : end], flags=re.M)  # fmt: skip
    assert count == 1, f"[{section}] {key}: {count} lines in containerd's default config"
    return text[: head.end()] + body + text[end:]


def node_config(default: str, root: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    text = re.sub(r'^root = ".*"$', f'root = "{root}/root"', default, count=1, flags=re.M)
    text = re.sub(r'^state = ".*"$', f'state = "{root}/state"', text, count=1, flags=re.M)
    text = _set(text, "grpc", "address", f'"{root}/state/containerd.sock"')
    text = _set(text, cri, "restrict_oom_score_adj", "true")
    text = _set(text, cri, "sandbox_image", f'"{PAUSE_IMAGE}"')
    text = _set(text, f"{cri}.containerd", "snapshotter", '"native"')
    text = _set(text, 'plugins."io.containerd.internal.v1.opt"', "path", f'"{root}/opt"')
    assert f'root = "{root}/root"' in text and f'state = "{root}/state"' in text
    return text


def _cgroup_roots() -> list[Path]:
    """Every mounted cgroup hierarchy (v1 controllers, named ones, v2)."""
    roots = [CGROUP_FS] if (CGROUP_FS / "cgroup.procs").exists() else []
    if CGROUP_FS.is_dir():
        roots += [p for p in sorted(CGROUP_FS.iterdir()) if (p / "cgroup.procs").exists()]
    return roots


def _cgroups_under(top: str) -> set[Path]:
    """`top` (e.g. "kubepods") and every cgroup below it, in every hierarchy."""
    found: set[Path] = set()
    for root in _cgroup_roots():
        base = root / top
        if base.is_dir():
            found |= {Path(d) for d, _, _ in os.walk(base)}
    return found


@dataclass
class Node:
    root: Path  # containerd's folders, socket, config, log, images
    kubelet_root: Path  # the kubelet's --root-dir: pods/<uid>/volumes/...
    popen: subprocess.Popen[bytes] | None = None
    shared: list[Path] = field(default_factory=list)  # bind-mounted on themselves, shared
    cgroups_before: set[Path] = field(default_factory=set)
    helpers: Tracked = field(default_factory=Tracked)
    closers: list[Callable[[], None]] = field(default_factory=list)  # pods' own clean-ups
    timings: dict[str, float] = field(default_factory=dict)
    keep_logs: Path | None = None  # where pods copy their containers' logs when they go
    accelhost_args: dict[str, list[str]] = field(default_factory=dict)  # how it is named

    @property
    def socket(self) -> Path:
        """In the state folder, as a node's /run/containerd/containerd.sock is (a DaemonSet
        that mounts the runtime's state folder finds it there)."""
        return self.state / "containerd.sock"

    @property
    def endpoint(self) -> str:
        """What CONTAINER_RUNTIME_ENDPOINT (crictl) and `--cri-socket` say for this node."""
        return f"unix://{self.socket}"

    @property
    def state(self) -> Path:
        return self.root / "state"

    def ctr(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [_tool("ctr"), "--address", str(self.socket), "--namespace", "k8s.io", *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"ctr {' '.join(args)}: {done.returncode}\n{done.stderr}"
        return done

    def log_tail(self, lines: int = 30) -> str:
        path = self.root / "containerd.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        """Every pod stopped and removed, containerd stopped, mounts, cgroups and folders
        removed; each step runs whatever the one before did."""
        for closer in reversed(self.closers):
            with contextlib.suppress(Exception):
                closer()
        self.helpers.add(_pids_naming(str(self.root)))
        if self.popen is not None:
            self.helpers.add([self.popen.pid])
            with contextlib.suppress(ProcessLookupError):
                self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=30)
        with contextlib.suppress(AssertionError):
            wait_for("containerd's shims to exit", lambda: not self.helpers.alive(), 15)
        self.helpers.kill_all()
        for _ in range(5):  # stacked mounts (the shared binds under their own points)
            points = _mount_points_under(self.root) + _mount_points_under(self.kubelet_root)
            if not points:
                break
            for point in sorted(points, key=len, reverse=True):
                done = subprocess.run(["umount", point], capture_output=True, check=False)
                if done.returncode != 0:
                    subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        for cgroup in sorted(_cgroups_under("kubepods") - self.cgroups_before, reverse=True):
            with contextlib.suppress(OSError):  # only empty ones go: never anybody else's
                cgroup.rmdir()
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.kubelet_root, ignore_errors=True)


def _share(node: Node, path: Path) -> None:
    """Bind `path` on itself and make it shared (recorded first: close() unmounts it)."""
    node.shared.append(path)
    for argv in (["mount", "--bind", str(path), str(path)], ["mount", "--make-shared", str(path)]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{' '.join(argv)}: {done.stderr}"


# Run in containerd's new mount namespace before it starts: the mount holding /run stops
# propagating (non-recursively, so the shared folders below stay shared), then /run is a
# private tmpfs. `unshare --propagation unchanged` keeps the binds' sharing with the host.
_INNER = (
    'mount --make-slave "$(findmnt -n -o TARGET -T /run)" && '
    "mount -t tmpfs -o size=64m,mode=755 ah-cri-run /run && "
    'exec "$0" --config "$1"'
)


def start_node(kubelet_root: Path, timeout: float = START_TIMEOUT_S) -> Node:
    """Start containerd in a new private folder, wait (bounded) until it answers, import
    the images. On any failure the node is closed again before the error propagates."""
    containerd = _tool("containerd")
    root = Path(tempfile.mkdtemp(prefix="ah-cri-", dir="/tmp"))
    kubelet_root.mkdir(parents=True, exist_ok=True)
    node = Node(root, kubelet_root, cgroups_before=_cgroups_under("kubepods"))
    try:
        started = time.monotonic()
        for sub in ("root", "state", "opt", "images", "logs"):
            (root / sub).mkdir()
        _share(node, root)
        _share(node, kubelet_root)
        default = subprocess.run(
            [containerd, "config", "default"], capture_output=True, text=True, check=True
        ).stdout
        config = root / "config.toml"
        config.write_text(node_config(default, root))
        argv = [_tool("unshare"), "--mount", "--propagation", "unchanged", "--",
                "sh", "-c", _INNER, containerd, str(config)]  # fmt: skip
        with open(root / "containerd.log", "wb") as log:
            node.popen = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

        def answers() -> bool:
            assert node.popen is not None
            if node.popen.poll() is not None:
                raise AssertionError(
                    f"containerd exited with {node.popen.returncode}:\n{node.log_tail()}"
                )
            if not node.socket.exists():
                return False
            probe = subprocess.run(
                [_tool("ctr"), "--address", str(node.socket), "version"],
                capture_output=True,
                timeout=30,
                check=False,
            )
            return probe.returncode == 0

        wait_for(f"containerd to answer on {node.socket}", answers, timeout, every=0.2)
        node.timings["containerd_start_s"] = time.monotonic() - started
        started = time.monotonic()
        for tar in write_images(root / "images"):
            node.ctr("images", "import", "--snapshotter", "native", str(tar))
        node.timings["images_s"] = time.monotonic() - started
    except BaseException:
        node.close()
        raise
    return node
