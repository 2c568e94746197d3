"""Pods' /dev/shm from the mount table: a memory-backed emptyDir under the kubelet's root
and a CRI sandbox's own shm, tied to the pod's uid or the sandbox's id, from mountinfo
lines shaped as a node writes them, and from a real tmpfs mounted here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from accelhost.containers.pod_volumes import (
    PodVolume,
    SandboxShm,
    parse_mountinfo,
    parse_pod_mounts,
    read_pod_mounts,
)
from accelhost.host.live import LiveHost
from container_hosts import cid
from fakehost import FakeMachine

UID = "8d3c6a2e-1b4f-4e5a-9c7d-0a1b2c3d4e5f"
OTHER = "0c9e4f3a-7d21-4b8e-a5f6-1e2d3c4b5a69"
BOX = cid(0x31)
CRIO_BOX = cid(0x32)
PODS = "/var/lib/kubelet/pods"

# A node's mount table: the host's own mounts, a memory emptyDir (dshm) and a disk-less
# cache of another pod, a projected token and a secret (tmpfs too, not /dev/shm), a
# containerd sandbox's shm, CRI-O's, a hugepages emptyDir, and a subPath bind.
NODE = f"""\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
26 22 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,size=65895236k,nr_inodes=16473809,mode=755,inode64
27 26 0:26 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw,inode64
30 22 0:25 / /run rw,nosuid,nodev,noexec,relatime shared:5 - tmpfs tmpfs rw,size=13185636k,mode=755,inode64
1201 30 0:290 / /run/containerd/io.containerd.grpc.v1.cri/sandboxes/{BOX}/shm rw,nosuid,nodev,noexec,relatime shared:600 - tmpfs shm rw,size=65536k,inode64
1202 30 0:291 / /run/containers/storage/overlay-containers/{CRIO_BOX}/userdata/shm rw,nosuid,nodev,noexec,relatime shared:601 - tmpfs shm rw,size=65536k,inode64
1210 22 0:312 / {PODS}/{UID}/volumes/kubernetes.io~empty-dir/dshm rw,relatime shared:650 - tmpfs tmpfs rw,size=1048576k,inode64
1211 22 0:313 / {PODS}/{UID}/volumes/kubernetes.io~projected/kube-api-access-7x2lq rw,relatime shared:651 - tmpfs tmpfs rw,size=65894612k,inode64
1212 22 0:314 / {PODS}/{OTHER}/volumes/kubernetes.io~empty-dir/cache rw,relatime shared:652 - tmpfs tmpfs rw,size=2097152k,inode64
1213 22 0:315 / {PODS}/{OTHER}/volumes/kubernetes.io~secret/hf-token rw,relatime shared:653 - tmpfs tmpfs rw,size=65894612k,inode64
1214 22 0:316 / {PODS}/{OTHER}/volumes/kubernetes.io~empty-dir/hugepage rw,relatime shared:654 - hugetlbfs nodev rw,pagesize=2M
1215 22 0:312 / {PODS}/{UID}/volume-subpaths/dshm/engine/0 rw,relatime shared:650 - tmpfs tmpfs rw,size=1048576k,inode64
1216 30 0:317 / /run/containerd/io.containerd.grpc.v1.cri/sandboxes/not-an-id/shm rw - tmpfs shm rw
"""


def test_a_nodes_mount_table_gives_each_pods_emptydir_and_each_sandboxs_shm() -> None:
    found = parse_pod_mounts(NODE)
    assert found.volumes == (
        PodVolume(
            UID, "dshm", f"{PODS}/{UID}/volumes/kubernetes.io~empty-dir/dshm", os.makedev(0, 312)
        ),
        PodVolume(
            OTHER,
            "cache",
            f"{PODS}/{OTHER}/volumes/kubernetes.io~empty-dir/cache",
            os.makedev(0, 314),
        ),
    )
    assert found.sandbox_shms == (
        SandboxShm(
            BOX,
            "containerd",
            f"/run/containerd/io.containerd.grpc.v1.cri/sandboxes/{BOX}/shm",
            os.makedev(0, 290),
        ),
        SandboxShm(
            CRIO_BOX,
            "cri-o",
            f"/run/containers/storage/overlay-containers/{CRIO_BOX}/userdata/shm",
            os.makedev(0, 291),
        ),
    )
    assert [v.name for v in found.volumes if v.pod_uid == UID] == ["dshm"]
    shms = {s.sandbox_id: s for s in found.sandbox_shms}
    shm = shms.get(BOX)
    assert shm is not None and shm.dev == os.makedev(0, 290) and shms.get(cid(1)) is None


def test_another_kubelet_root_and_containerd_state() -> None:
    """A DaemonSet that mounts the host's kubelet root at /host/var/lib/kubelet; k3s's
    containerd state under /run/k3s/containerd; a path with a blank, escaped as mountinfo
    writes it."""
    text = (
        f"900 22 0:401 / /host/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~empty-dir/dshm "
        "rw,relatime master:650 - tmpfs tmpfs rw,size=1048576k\n"
        f"901 22 0:402 / /run/k3s/containerd/io.containerd.grpc.v1.cri/sandboxes/{BOX}/shm "
        "rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k\n"
        f"902 22 0:403 / /data/kube\\040let/pods/{OTHER}/volumes/kubernetes.io~empty-dir/dshm "
        "rw - tmpfs tmpfs rw\n"
    )
    daemonset = parse_pod_mounts(text, "/host/var/lib/kubelet/", "/run/k3s/containerd")
    assert [(v.pod_uid, v.dev) for v in daemonset.volumes] == [(UID, os.makedev(0, 401))]
    assert [s.sandbox_id for s in daemonset.sandbox_shms] == [BOX]
    assert parse_pod_mounts(text).volumes == () and parse_pod_mounts(text).sandbox_shms == ()
    blank = parse_pod_mounts(text, "/data/kube let")
    assert [(v.pod_uid, v.mount_point) for v in blank.volumes] == [
        (OTHER, f"/data/kube let/pods/{OTHER}/volumes/kubernetes.io~empty-dir/dshm")
    ]


def test_malformed_lines_are_skipped() -> None:
    text = "\n".join(
        [
            "garbage",
            "1 2 3 4 5 6 - tmpfs",  # no source after the type
            "x 22 0:1 / /a rw - tmpfs tmpfs rw",  # no mount id
            "7 22 zero / /a rw - tmpfs tmpfs rw",  # no device
            f"8 22 0:9 / {PODS}/{UID}/volumes/kubernetes.io~empty-dir/dshm rw shared:1 - tmpfs tmpfs rw",
        ]
    )
    mounts = parse_mountinfo(text)
    assert [m.mount_id for m in mounts] == [8] and mounts[0].fstype == "tmpfs"
    assert [v.name for v in parse_pod_mounts(text).volumes] == ["dshm"]


def test_the_reader_says_a_named_kubelet_root_that_is_not_there_once() -> None:
    m = FakeMachine(files={"/proc/self/mountinfo": NODE})
    usual = read_pod_mounts(m.host())  # no kubelet on this host is no news
    assert usual.notes == () and len(usual.volumes) == 2
    named = read_pod_mounts(m.host(), "/srv/kubelet")
    assert named.notes == ("kubelet root /srv/kubelet: no such directory",)
    assert named.volumes == () and len(named.sandbox_shms) == 2  # the sandboxes' are there
    # no mount table (a recording made before pods were read): said only to whom named a
    # kubelet root; every older snapshot of a host without pods stays as it was
    assert read_pod_mounts(FakeMachine().host()).notes == ()
    blind = read_pod_mounts(FakeMachine(stats={}).host(), "/var/lib/kubelet")
    assert "/proc/self/mountinfo not read: pods' volumes not seen" in blind.notes


def test_a_real_tmpfs_at_the_kubelets_path_is_found_with_its_device(tmp_path: Path) -> None:
    """We are root: a tmpfs mounted where the kubelet mounts an emptyDir, read back through
    the live host door; its device id is the one `stat` gives every file in it."""
    root = tmp_path / "kube let"
    volume = root / "pods" / UID / "volumes" / "kubernetes.io~empty-dir" / "dshm"
    volume.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
    try:
        (volume / "psm_1").write_bytes(b"x")
        found = read_pod_mounts(LiveHost(), str(root))
        assert found.notes == ()
        assert found.volumes == (
            PodVolume(UID, "dshm", str(volume), os.stat(volume / "psm_1").st_dev),
        )
    finally:
        subprocess.run(["umount", str(volume)], check=True)


def _volume_at(root: Path) -> Path:
    volume = root / "pods" / UID / "volumes" / "kubernetes.io~empty-dir" / "dshm"
    volume.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
    return volume


def test_an_emptydir_unmounted_while_read_is_skipped_and_nothing_under_it_judged(
    tmp_path: Path,
) -> None:
    """The pod goes while a look reads it: the kubelet unmounts its emptyDir after the mount
    table was read. What lies under the mount point then (here a vLLM-named file on the
    kubelet root's own disk) is not the volume's: nothing of it is judged, so nothing of it
    can be removed. The same look with the volume still mounted judges its file."""
    from accelhost.containers.pod_volumes import MOUNTINFO
    from accelhost.hygiene.facts.containers import read_container_facts
    from accelhost.hygiene.options import HygieneOptions

    root = tmp_path / "kubelet"
    volume = _volume_at(root)
    mounted = [True]

    class PodGoesWhileRead(LiveHost):
        unmount = False

        def read_file(self, path: str) -> str | None:
            text = super().read_file(path)
            if path == MOUNTINFO and mounted[0] and self.unmount:
                subprocess.run(["umount", str(volume)], check=True)
                mounted[0] = False
            return text

    try:
        (volume / "psm_in_volume").write_bytes(b"x")
        seen = read_container_facts(LiveHost(), {}, None, HygieneOptions(kubelet_root=str(root)))
        dirs = [d for d in seen.shm_dirs if d.path == str(volume)]
        assert [os.path.basename(f.path) for d in dirs for f in d.files or ()] == [
            "psm_in_volume"
        ], seen.shm_dirs
        host = PodGoesWhileRead()
        host.unmount = True
        (volume / "psm_in_volume").unlink()
        subprocess.run(["umount", str(volume)], check=True)
        (volume / "psm_on_disk").write_bytes(b"x")  # under the mount point, on the disk
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(volume)], check=True)
        gone = read_container_facts(host, {}, None, HygieneOptions(kubelet_root=str(root)))
        assert not mounted[0]
        assert not [d for d in gone.shm_dirs if d.path == str(volume)], gone.shm_dirs
    finally:
        if mounted[0]:
            subprocess.run(["umount", str(volume)], check=True)
