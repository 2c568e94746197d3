"""contrib/k8s/daemonset.yaml's pod, run on the suite's CRI node as the kubelet runs it.

The yaml is read (pyyaml) and its pod template turned, field by field, into the CRI
messages the kubelet sends for it: the sandbox's and the container's NamespaceOption
(hostPID, hostIPC: NODE), the container's command and args, its securityContext
(capabilities, privileged, read-only root, run as user, no_new_privs from
allowPrivilegeEscalation, seccomp, AppArmor, the kubelet's default masked and read-only
/proc paths), its resources (CPU shares and quota, memory limit), and each volumeMount
as a CRI Mount of its hostPath volume (readOnly, mountPropagation). What must differ on
this node is changed here and said where it is done:

- the image: the yaml names one pushed to a registry; here it is the local accelhost
  image (cri_images.py), empty, with the host's system folders, Python, the virtualenv and
  this tree's src mounted read-only: those mounts are the image's content, not the pod's;
- hostPaths: each is mapped to the node's own folder for it (`host_paths`): the kubelet's
  pods directory and containerd's state folder are the private node's, the journal's
  folder a test folder; a hostPath the map lacks fails the test;
- the pod's network: there is no CNI here, so the pod is on the node's network (the yaml's
  pod is not) and its metrics address is a free loopback port, not 0.0.0.0:9464.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cri_images import ACCELHOST_IMAGE
from cri_node import Node
from cri_pod import CONTAINER, NODE, POD, Pod, api, make_pod
from docker_daemon import host_paths
from engine import free_port

DAEMONSET = Path(__file__).resolve().parents[2] / "contrib" / "k8s" / "daemonset.yaml"
# What the kubelet masks and makes read-only in every unprivileged container (procMount
# Default; k8s.io/kubernetes pkg/securitycontext: defaultMaskedPaths, defaultReadonlyPaths).
MASKED = ("/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
          "/sys/firmware", "/sys/devices/virtual/powercap")  # fmt: skip
READONLY = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")
PROPAGATION = {None: 0, "None": 0, "HostToContainer": 1, "Bidirectional": 2}
SECCOMP = {"RuntimeDefault": 0, "Unconfined": 1, "Localhost": 2}


def load(path: Path = DAEMONSET) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    assert doc["kind"] == "DaemonSet", doc.get("kind")
    return dict(doc)


def host_paths_of(node: Node, journal_dir: Path) -> dict[str, Path]:
    """The yaml's hostPaths on this node: the kubelet's pods directory and containerd's
    state folder (its socket is `containerd.sock` there, as /run/containerd's is) are
    the private node's; /sys and /dev/shm are this namespace's (the test runs in a PID,
    mount and IPC namespace of its own with a private /dev/shm: the pod's "host")."""
    return {
        "/sys": Path("/sys"),
        "/dev/shm": Path("/dev/shm"),
        "/var/log/accelhost": journal_dir,
        "/var/lib/kubelet/pods": node.kubelet_root / "pods",
        "/run/containerd": node.state,
    }


def _quantity(text: str) -> float:
    """A resource quantity: CPUs ("200m", "1") or bytes ("256Mi", "1Gi")."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def resources(container: dict[str, Any]) -> Any:
    """The kubelet's CPU shares (requests), CFS quota and memory limit (limits)."""
    res = container.get("resources", {})
    requests, limits = res.get("requests", {}), res.get("limits", {})
    period = 100_000
    return api().LinuxContainerResources(
        cpu_period=period,
        cpu_quota=int(_quantity(limits["cpu"]) * period) if "cpu" in limits else 0,
        cpu_shares=max(2, int(_quantity(requests.get("cpu", "0")) * 1024)),
        memory_limit_in_bytes=int(_quantity(limits["memory"])) if "memory" in limits else 0,
    )


def security(spec: dict[str, Any], container: dict[str, Any]) -> Any:
    pb = api()
    sc = container.get("securityContext", {})
    caps = sc.get("capabilities", {})
    privileged = bool(sc.get("privileged", False))
    apparmor = sc.get("appArmorProfile")
    seccomp = sc.get("seccompProfile")
    return pb.LinuxContainerSecurityContext(
        capabilities=pb.Capability(
            add_capabilities=caps.get("add", []), drop_capabilities=caps.get("drop", [])
        ),
        privileged=privileged,
        namespace_options=namespaces(spec),
        run_as_user=pb.Int64Value(value=sc["runAsUser"]) if "runAsUser" in sc else None,
        readonly_rootfs=bool(sc.get("readOnlyRootFilesystem", False)),
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
        masked_paths=[] if privileged else MASKED,
        readonly_paths=[] if privileged else READONLY,
        seccomp=pb.SecurityProfile(profile_type=SECCOMP[seccomp["type"]]) if seccomp else None,
        # sent as the kubelet sends it; containerd applies it where the kernel has AppArmor
        # (these machines have none) and ignores an unconfined profile elsewhere
        apparmor=pb.SecurityProfile(profile_type=SECCOMP[apparmor["type"]]) if apparmor else None,
    )


def namespaces(spec: dict[str, Any]) -> Any:
    # network NODE: no CNI here (the yaml's pod has a network of its own)
    return api().NamespaceOption(
        network=NODE,
        pid=NODE if spec.get("hostPID") else CONTAINER,
        ipc=NODE if spec.get("hostIPC") else POD,
    )


def mounts(spec: dict[str, Any], container: dict[str, Any], paths: dict[str, Path]) -> list[Any]:
    """Each volumeMount as the kubelet passes a hostPath volume's, its type checked."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    out = []
    for vm in container.get("volumeMounts", []):
        source = volumes[vm["name"]]["hostPath"]
        assert source["path"] in paths, f"hostPath {source['path']}: no folder for it here"
        host = paths[source["path"]]
        kind = source.get("type", "")
        if kind == "DirectoryOrCreate":
            host.mkdir(parents=True, exist_ok=True)
        assert kind != "Directory" or host.is_dir(), f"hostPath {source['path']}: no {host}"
        assert kind != "File" or host.is_file(), f"hostPath {source['path']}: no {host}"
        out.append(api().Mount(
            container_path=vm["mountPath"], host_path=str(host),
            readonly=bool(vm.get("readOnly", False)),
            propagation=PROPAGATION[vm.get("mountPropagation")],
        ))  # fmt: skip
    return out


def args_here(container: dict[str, Any], metrics_addr: str) -> list[str]:
    """The yaml's args, only the metrics address changed (the pod is on the node's network
    here: a free loopback port instead of every address's 9464)."""
    out = []
    for arg in container.get("args", []):
        if arg.startswith("--metrics-addr="):
            arg = f"--metrics-addr={metrics_addr}"
        out.append(arg)
    assert f"--metrics-addr={metrics_addr}" in out, "the yaml's watch serves no metrics"
    return out


def option(container: dict[str, Any], name: str) -> str:
    """The value of the yaml's `--name=VALUE` arg."""
    found = [a.split("=", 1)[1] for a in container.get("args", []) if a.startswith(f"--{name}=")]
    assert len(found) == 1, f"--{name}: {found}"
    return found[0]


@dataclass
class DaemonSetPod:
    pod: Pod
    container: dict[str, Any]  # the yaml's
    id: str
    metrics_addr: str
    journal_dir: Path

    @property
    def journal(self) -> Path:
        """The watch's journal on the node (the yaml's --journal, in its hostPath)."""
        return self.journal_dir / Path(option(self.container, "journal")).name

    def pid(self) -> int:
        """The watch's pid (the runtime's info; the node is in this PID namespace)."""
        _, info = self.pod.status(self.id)
        pid = int(info["pid"])
        self.pod.tracked.add([pid])
        return pid

    def confinement(self) -> dict[str, Any]:
        """What the kernel says of the running watch: its uid, effective capabilities,
        no_new_privs, seccomp mode, and whether its root file system is read-only."""
        pid = self.pid()
        status = dict(
            line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        )
        root = [ln.split() for ln in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                if ln.split()[4] == "/"]  # fmt: skip
        return {
            "uid": int(status["Uid"].split()[1]),
            "cap_eff": int(status["CapEff"], 16),
            "no_new_privs": int(status["NoNewPrivs"]),
            "seccomp": int(status["Seccomp"]),
            "root_ro": bool(root) and "ro" in root[-1][5].split(","),
        }

    def log_lines(self) -> list[str]:
        """The container's output, from its CRI log (`TIME STREAM P|F TEXT`, P: partial)."""
        path = self.pod.log_dir / self.pod.container / "0.log"
        lines, partial = [], ""
        text = path.read_text(errors="replace") if path.exists() else ""
        for raw in text.splitlines():
            parts = raw.split(" ", 3)
            if len(parts) < 4:
                continue
            partial += parts[3]
            if parts[2] == "F":
                lines.append(partial)
                partial = ""
        return lines

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log_lines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                out.append(event)
        return out

    def journal_entries(self) -> list[dict[str, Any]]:
        if not self.journal.exists():
            return []
        return [json.loads(ln) for ln in self.journal.read_text().splitlines() if ln.strip()]


def start_daemonset(
    node: Node, journal_dir: Path, doc: dict[str, Any] | None = None
) -> DaemonSetPod:
    """The yaml's pod on the node: its sandbox, then its one container, started."""
    doc = doc or load()
    meta, spec = doc["metadata"], doc["spec"]["template"]["spec"]
    [container] = spec["containers"]
    ns = namespaces(spec)
    pod = make_pod(node, meta["namespace"], f"{meta['name']}-node0", container=container["name"],
                   namespaces=(ns.network, ns.pid, ns.ipc), empty_dir_size=None)  # fmt: skip
    pb = api()
    addr = f"127.0.0.1:{free_port()}"
    image_content = [pb.Mount(container_path=p, host_path=p, readonly=True) for p in
                     host_paths(system=("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc"))]  # fmt: skip
    (pod.log_dir / pod.container).mkdir(exist_ok=True)
    config = pb.ContainerConfig(
        metadata=pb.ContainerMetadata(name=container["name"], attempt=0),
        image=pb.ImageSpec(image=ACCELHOST_IMAGE),
        command=container["command"],
        args=args_here(container, addr),
        mounts=[*image_content, *mounts(spec, container, host_paths_of(node, journal_dir))],
        labels={**pod.pod_labels(), "io.kubernetes.container.name": container["name"]},
        annotations={"io.kubernetes.container.restartCount": "0"},
        log_path=f"{pod.container}/0.log",
        linux=pb.LinuxContainerConfig(
            resources=resources(container), security_context=security(spec, container)
        ),
    )
    request = pb.CreateContainerRequest(
        pod_sandbox_id=pod.sandbox_id, config=config, sandbox_config=pod.sandbox_config()
    )
    cid = str(pod.cri.call("CreateContainer", request).container_id)
    pod.cri.call("StartContainer", pb.StartContainerRequest(container_id=cid))
    return DaemonSetPod(pod, container, cid, addr, journal_dir)
