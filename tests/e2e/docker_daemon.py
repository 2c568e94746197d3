"""A Docker daemon of the suite's own, and the containers it runs (tests/e2e/test_docker_e2e.py).

Why a daemon of its own: the suite must never see or touch anybody else's containers, and
CI machines have no daemon at all. It runs with vfs storage (any filesystem, no overlay
module needed), no bridge, no iptables and no masquerading (nothing changes the host's
network: containers use `--network host` and only loopback), and every path it writes
under one temporary folder: socket, data root, exec root, pid file.

No registry can be reached, so the image is `docker import` of a tar holding only empty
/tmp and /root; containers get this host's /usr, /lib, /lib64, /bin and /etc, the Python
installation, the virtualenv running the suite and the repository's src bind-mounted
read-only (`host_mounts`): the same Python and vLLM run inside. Not /sbin: `docker run
--init` mounts its init at /sbin/docker-init, which a read-only /sbin would hide.

Safety: only containers this daemon made are stopped or removed, by id; the only processes
signalled are this daemon and those whose command line names its folder (its containerd and
shims), recorded with their start times. `Daemon.close()` runs in the fixture's finally.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from procs import Tracked, cmdline, wait_for

IMAGE = "accelhost-e2e:empty"
START_TIMEOUT_S = 90.0
REPO_SRC = Path(__file__).resolve().parents[2] / "src"
# What `make e2e` installs when dockerd is missing (Debian's packages).
INSTALL_HINT = "`make e2e` installs Debian's docker.io and tini when dockerd is missing"


def dockerd_path() -> str:
    found = shutil.which("dockerd") or (
        "/usr/sbin/dockerd" if os.access("/usr/sbin/dockerd", os.X_OK) else None
    )
    if found is None:
        raise AssertionError(f"no dockerd on this machine: {INSTALL_HINT}")
    return found


def docker_cli() -> str:
    """Debian's client first: it matches Debian's daemon (another `docker` may be newer)."""
    if os.access("/usr/bin/docker", os.X_OK):
        return "/usr/bin/docker"
    found = shutil.which("docker")
    if found is None:
        raise AssertionError(f"no docker client on this machine: {INSTALL_HINT}")
    return found


def host_paths(
    *extra: str | Path, system: tuple[str, ...] = ("/usr", "/lib", "/lib64", "/bin", "/etc")
) -> list[str]:
    """The host's `system` folders, the Python installation, the suite's virtualenv, the
    repository's src and `extra` paths (the model) that exist, parents before children and
    none inside another: what a container gets bind-mounted read-only."""
    wanted = [*system, os.path.realpath(sys.base_prefix), sys.prefix, str(REPO_SRC)]
    mounted: list[str] = []
    for path in [*wanted, *map(str, extra)]:
        path = os.path.normpath(path)
        covered = any(path == m or path.startswith(m.rstrip("/") + "/") for m in mounted)
        if os.path.exists(path) and not covered:
            mounted.append(path)
    return mounted


def host_mounts(*extra: str | Path) -> list[str]:
    """`-v SRC:SRC:ro` for `host_paths` (not /sbin: see the module's docstring)."""
    return [arg for path in host_paths(*extra) for arg in ("-v", f"{path}:{path}:ro")]


def _empty_image_tar() -> bytes:
    """A root filesystem with nothing but /tmp (1777) and /root: the rest is bind-mounted."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, mode in (("tmp", 0o1777), ("root", 0o700)):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode, int(time.time())
            tar.addfile(info)
    return buf.getvalue()


def _mount_points_under(root: Path) -> list[str]:
    """Mount points at or below `root`, deepest first (mountinfo escapes spaces as \\040)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")
        if point == str(root) or point.startswith(f"{root}/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def _pids_naming(text: str) -> set[int]:
    return {int(p) for p in os.listdir("/proc") if p.isdigit() and text in cmdline(int(p))}


@dataclass
class Container:
    """One container this daemon made; its processes found by the cgroup naming its id."""

    daemon: Daemon
    id: str
    name: str
    tracked: Tracked = field(default_factory=Tracked)

    def inspect(self) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(self.daemon.docker("inspect", self.id).stdout)
        return found[0]

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = self.inspect()["State"]
        return state

    def pids(self) -> set[int]:
        """Its live processes: every pid whose /proc/PID/cgroup path names the container's
        id (cgroup v1 and v2, cgroupfs and systemd drivers), recorded with start times."""
        found = set()
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    if self.id in Path(f"/proc/{name}/cgroup").read_text():
                        found.add(int(name))
        self.tracked.add(found)
        return {p for p in found if self.tracked.is_alive(p)}

    def pid1(self) -> int:
        """PID 1 of the container as the host numbers it (docker inspect's State.Pid)."""
        pid = int(self.state()["Pid"])
        assert pid > 0, f"{self.name} is not running: {self.state()}\n{self.logs()}"
        self.tracked.add([pid])
        return pid

    def logs(self, tail: int = 40) -> str:
        done = self.daemon.docker("logs", "--tail", str(tail), self.id, check=False)
        kept = [ln for ln in (done.stdout + done.stderr).splitlines() if "leaked " not in ln]
        return "\n".join(kept[-tail:])


@dataclass
class Daemon:
    root: Path
    popen: subprocess.Popen[bytes]
    cli: str
    made: list[Container] = field(default_factory=list)
    helpers: Tracked = field(default_factory=Tracked)

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def host(self) -> str:
        """What DOCKER_HOST says to reach this daemon (the docker CLI's `-H`)."""
        return f"unix://{self.socket}"

    def docker(
        self, *args: str, timeout: float = 120.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.cli, "-H", self.host, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"docker {shlex.join(args)} exited {done.returncode}\n{done.stderr[-3000:]}"
            )
        return done

    def create(self, name: str, options: Sequence[str], argv: Sequence[str]) -> Container:
        """`docker create` (the id is recorded before anything can fail), then `docker start`."""
        cid = self.docker("create", "--name", name, *options, IMAGE, *argv).stdout.split()[-1]
        container = Container(self, cid, name)
        self.made.append(container)
        self.docker("start", cid)
        return container

    def remove(self, container: Container) -> float:
        """`docker rm -f` of one of ours; returns how long it took."""
        started = time.monotonic()
        self.docker("rm", "-f", container.id, timeout=120, check=False)
        return time.monotonic() - started

    def close(self) -> None:
        """Remove every container it made, stop it, unmount and remove its folders."""
        for container in reversed(self.made):
            with contextlib.suppress(Exception):
                container.pids()
                self.remove(container)
                container.tracked.kill_all()  # none should be left: rm -f kills them all
        self.helpers.add(_pids_naming(str(self.root)) | {self.popen.pid})
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=30)
        with contextlib.suppress(AssertionError):
            wait_for("dockerd's containerd and shims to exit", lambda: not self.helpers.alive(), 15)
        self.helpers.kill_all()
        for point in _mount_points_under(self.root):
            done = subprocess.run(["umount", point], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def start_daemon(timeout: float = START_TIMEOUT_S) -> Daemon:
    """Start a daemon in a new temporary folder, wait (bounded) until it answers, and import
    the empty image. On any failure it is closed again before the error propagates."""
    dockerd = dockerd_path()
    root = Path(tempfile.mkdtemp(prefix="ah-dockerd-", dir="/tmp"))  # unix sockets: short paths
    for sub in ("data", "exec"):
        (root / sub).mkdir()
    log = open(root / "dockerd.log", "wb")  # noqa: SIM115 (dockerd writes it until it stops)
    argv = [
        dockerd, "--storage-driver", "vfs", "--iptables=false", "--ip6tables=false",
        "--bridge=none", "--ip-masq=false", "--host", f"unix://{root}/docker.sock",
        "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
        "--pidfile", str(root / "docker.pid"),
    ]  # fmt: skip
    popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    daemon = Daemon(root, popen, docker_cli())
    try:

        def answers() -> bool:
            if popen.poll() is not None:
                raise AssertionError(
                    f"dockerd exited with {popen.returncode}:\n{daemon_log(daemon)}"
                )
            return daemon.socket.exists() and daemon.docker("version", check=False).returncode == 0

        wait_for(f"dockerd to answer on {daemon.socket}", answers, timeout)
        tar = root / "empty-image.tar"
        tar.write_bytes(_empty_image_tar())
        daemon.docker("import", str(tar), IMAGE)
    except BaseException:
        daemon.close()
        raise
    return daemon


def daemon_log(daemon: Daemon, lines: int = 30) -> str:
    path = daemon.root / "dockerd.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])
