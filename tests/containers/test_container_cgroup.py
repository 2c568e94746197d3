"""Every runtime's cgroup shape names its container; host processes are in none; any text
either parses or raises ParseError (never anything else)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelhost.containers.cgroup import (
    MAX_CGROUP_TEXT,
    CgroupContainer,
    parse_cgroup,
    parse_cgroup_path,
)
from accelhost.errors import ParseError
from container_hosts import SHAPES, cgroup_text, cid

UID = "8d3c6a2e-1b4f-4e5a-9c7d-0a1b2c3d4e5f"
EXPECTED = {
    "docker-cgroupfs": ("docker", None, None),
    "docker-systemd": ("docker", None, None),
    "containerd-k8s-systemd": ("containerd", UID, "burstable"),
    "k8s-cgroupfs": ("kubernetes", UID, "besteffort"),
    "k8s-guaranteed-cgroupfs": ("kubernetes", UID, "guaranteed"),
    "crio-systemd": ("cri-o", UID, "guaranteed"),
    "podman-user": ("podman", None, None),
    "podman-machine": ("podman", None, None),
    "podman-quadlet": ("podman", None, None),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("v1", [False, True])
def test_each_runtime_shape_names_runtime_id_and_pod(shape: str, v1: bool) -> None:
    path = SHAPES[shape].format(c=cid(7), u=UID, u_=UID.replace("-", "_"))
    found = parse_cgroup(cgroup_text(path, v1))
    assert found is not None
    runtime, pod, qos = EXPECTED[shape]
    assert (found.runtime, found.container_id, found.pod_uid, found.qos) == (
        runtime,
        cid(7),
        pod,
        qos,
    )


@pytest.mark.parametrize(
    "path",
    [
        "/init.scope",
        "/user.slice/user-1000.slice/session-3.scope",
        "/system.slice/docker.service",  # the daemon itself
        f"/system.slice/crio-conmon-{cid(3)}.scope",  # CRI-O's monitor, on the host
        f"/machine.slice/libpod-conmon-{cid(3)}.scope",  # Podman's monitor
        f"/libpod_parent/{cid(3)}/conmon",  # Podman's monitor of a pod (cgroupfs), pod id
        "/kubepods.slice/kubepods-burstable.slice",  # a pod slice holds no process itself
        f"/docker/{cid(3)[:63]}",  # 63 hex: no id
        f"/system.slice/docker-{cid(0xAB).upper()}.scope",  # ids are lower-case hex
    ],
)
def test_host_processes_and_monitors_are_in_no_container(path: str) -> None:
    assert parse_cgroup(f"0::{path}\n") is None


@pytest.mark.parametrize(
    "path, qos",
    [
        ("/../../besteffort/pod{u}/{c}", "besteffort"),  # cgroupfs driver, another QoS
        ("/../pod{u}/{c}", None),  # the QoS level, if any, lies above: unknown
        (
            "/../../../kubepods-burstable.slice/kubepods-burstable-pod{u_}.slice/"
            "cri-containerd-{c}.scope",
            "burstable",
        ),  # systemd driver
    ],
)
def test_a_pod_seen_from_a_readers_own_cgroup_namespace(path: str, qos: str | None) -> None:
    """A DaemonSet on cgroup v2 has a cgroup namespace of its own: other pods' paths are
    relative to its root, the kubepods root above it."""
    text = "0::" + path.format(c=cid(7), u=UID, u_=UID.replace("-", "_")) + "\n"
    found = parse_cgroup(text)
    assert found is not None and (found.container_id, found.pod_uid, found.qos) == (
        cid(7),
        UID,
        qos,
    )
    assert parse_cgroup("0::/../../../init.scope\n") is None  # the host, seen from the pod


def test_nested_docker_names_the_innermost_container() -> None:
    found = parse_cgroup_path(f"/docker/{cid(1)}/docker/{cid(2)}")
    assert found is not None and found.container_id == cid(2)


def test_v1_host_with_v2_line_present_reads_the_hierarchy_lines() -> None:
    text = f"5:memory:/docker/{cid(9)}\n4:cpu:/docker/{cid(9)}\n0::/\n"
    found = parse_cgroup(text)
    assert found is not None and found.runtime == "docker" and found.container_id == cid(9)


@pytest.mark.parametrize("text", ["garbage\n", "x::/docker\n", "0:cpu\n", "0::relative\n"])
def test_text_that_is_no_cgroup_file_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="/proc/7/cgroup"):
        parse_cgroup(text, "/proc/7/cgroup")


def test_far_too_long_text_is_refused_unread() -> None:
    with pytest.raises(ParseError, match="no cgroup file is that long"):
        parse_cgroup("0::/\n" * (MAX_CGROUP_TEXT // 4))


# Shapes as public reports paste them (ids and names as there), and what each names:
# (runtime, id, pod uid, qos, name); runtime "": a bare id only a runtime's listing confirms.
_FA3 = "fa3efb77682c417a737a22a72a51e5a48d45ad7b7b88b31519d00f44f4ef4176"
_20B = "20b6d1b909f3098d128b75aeccc191bdc1ace5ea0a45878046db6dd282370d92"
_D7D = "d7dfb4a21fe1703a8537e60d5af248af729315d187b24a538102d14874c8117d"
_KIND_POD = "1e597579-417e-482f-bf65-5fe170c3aebd"
REAL_SHAPES: list[tuple[str, tuple[str, str, str | None, str | None, str | None] | None]] = [
    # Docker, cgroupfs, `--cgroup-parent=/user.slice` (docker/for-linux#671, the tree it
    # expected, Ubuntu 16.04)
    (f"0::/user.slice/{_FA3}\n", ("", _FA3, None, None, None)),
    # Docker, cgroupfs, `--cgroup-parent=benchexec`, seen from the host's cgroup namespace
    # (sosy-lab/benchexec#36)
    (f"3:cpuacct:/benchexec/{_20B}\n", ("", _20B, None, None, None)),
    # containerd's default `/<namespace>/<id>` (containerd oci/spec.go populateDefaultUnixSpec;
    # nerdctl generateCgroupPath leaves it to containerd with cgroupfs), nerdctl's `default`
    (f"0::/default/{_FA3}\n", ("containerd", _FA3, None, None, None)),
    # kind: kubelet's custom cgroup root `kubelet.slice`, systemd driver (containerd/nri#227)
    (
        "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{_KIND_POD.replace('-', '_')}.slice/"
        f"cri-containerd-{_D7D}.scope\n",
        ("containerd", _D7D, _KIND_POD, "besteffort", None),
    ),
    # LXD 4 (LXC 4.0) on Ubuntu 20.04, v1 with systemd in the container (htop#328)
    (
        "12:freezer:/lxc.payload.buster\n"
        "11:memory:/lxc.payload.buster/system.slice/networking.service\n"
        "3:cpuset:/lxc.payload.buster\n"
        "1:name=systemd:/lxc.payload.buster/system.slice/networking.service\n"
        "0::/lxc.payload.buster/system.slice/networking.service\n",
        ("lxc", "buster", None, None, "buster"),
    ),
    # LXC 4.0's attach cgroup below the container's (lxc/lxc#3373)
    ("0::/lxc.payload.test/.lxc\n", ("lxc", "test", None, None, "test")),
    # LXC 3.1 to 3.2: `lxc` split into lxc.payload/ and lxc.monitor/ (draios/sysdig#1344)
    ("4:cpuset:/lxc.payload/web\n", ("lxc", "web", None, None, "web")),
    # older LXC: `lxc/<name>` (netdata/netdata#3199; lxc/lxc#1275 `8:cpuset:/lxc/c`)
    (
        "4:cpu,cpuacct:/lxc/deloittedigi/system.slice/php7.1-fpm.service\n",
        ("lxc", "deloittedigi", None, None, "deloittedigi"),
    ),
    ("8:cpuset:/lxc/c\n", ("lxc", "c", None, None, "c")),
    # LXC's monitor (lxc/lxc src/lxc/cgroups/cgfsng.c, DEFAULT_MONITOR_CGROUP_PREFIX): host
    ("0::/lxc.monitor.buster\n", None),
    ("0::/lxc.monitor/web\n", None),
    # LXC retries `<name>-1` .. `-999` when the cgroup exists (cgfsng.c CGROUP_CREATE_RETRY):
    # `web-1` may be container `web-1` or `web`: not named
    ("0::/lxc.payload.web-1\n", None),
    ("4:cpuset:/lxc/web-2/init.scope\n", None),
    # systemd-nspawn started by machined: machine-<name>.scope/payload (systemd/systemd#18104)
    (
        "0::/machine.slice/machine-fedora.scope/payload/system.slice/sshd.service\n",
        ("systemd-nspawn", "fedora", None, None, "fedora"),
    ),
    # its scope name escapes `-` (systemd/systemd#38440: machine-TEST\x2d13\x2dNSPAWN...)
    (
        "0::/machine.slice/machine-TEST\\x2d13\\x2dNSPAWN.machinectl\\x2dbind.7ye.scope/payload\n",
        (
            "systemd-nspawn",
            "TEST-13-NSPAWN.machinectl-bind.7ye",
            None,
            None,
            "TEST-13-NSPAWN.machinectl-bind.7ye",
        ),
    ),
    # `machinectl start`: systemd-nspawn@.service (--keep-unit, Slice=machine.slice); the
    # payload below it, nspawn itself in `supervisor` (systemd src/nspawn/nspawn-cgroup.c)
    (
        "0::/machine.slice/systemd-nspawn@debian.service/payload/init.scope\n",
        ("systemd-nspawn", "debian", None, None, "debian"),
    ),
    ("0::/machine.slice/systemd-nspawn@debian.service/supervisor\n", None),
    # a machine scope without `payload` may be a VM's (libvirt's qemu) or a v1 nspawn's own
    ("0::/machine.slice/machine-qemu\\x2d1\\x2dvm1.scope/libvirt/emulator\n", None),
    ("1:name=systemd:/machine.slice/machine-fedora.scope\n", None),
    # nspawn --keep-unit in any unit: the unit's name is no machine's (systemd/systemd#16796)
    ("0::/user.slice/user-1001.slice/user@1001.service/leaky.scope/payload/init.scope\n", None),
    # already read before: Docker, systemd driver, `--cgroup-parent=my.slice` (runc's
    # getUnitName `<prefix>-<id>.scope` in the parent slice, docker/runc 7695a0d)
    (f"0::/my.slice/docker-{_FA3}.scope\n", ("docker", _FA3, None, None, None)),
    # rootless Docker, systemd (docker/docs#14545)
    (
        f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/docker-{_FA3}.scope\n",
        ("docker", _FA3, None, None, None),
    ),
    # rootless Podman in a pod (containers/podman#6400)
    (
        "0::/user.slice/user-1000.slice/user@1000.service/user.slice/"
        f"user-libpod_pod_{_20B}.slice/libpod-{_FA3}.scope/container\n",
        ("podman", _FA3, None, None, None),
    ),
    # nerdctl, systemd: `system.slice:nerdctl:<id>` (nerdctl generateCgroupPath)
    (f"0::/system.slice/nerdctl-{_FA3}.scope\n", ("containerd", _FA3, None, None, None)),
    # Kubernetes, cgroupfs, kubelet `--cgroup-root=/custom`
    (
        f"0::/custom/kubepods/burstable/pod{UID}/{_FA3}\n",
        ("kubernetes", _FA3, UID, "burstable", None),
    ),
]


@pytest.mark.parametrize("text, expected", REAL_SHAPES)
def test_real_shapes_name_their_container_or_none(
    text: str, expected: tuple[str, str, str | None, str | None, str | None] | None
) -> None:
    found = parse_cgroup(text)
    got = found and (found.runtime, found.container_id, found.pod_uid, found.qos, found.name)
    assert got == expected


def _well_formed(found: CgroupContainer) -> bool:
    if found.runtime in ("lxc", "systemd-nspawn"):
        return found.name == found.container_id and bool(found.name)
    return len(found.container_id) == 64 and found.name is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_or_raises_parse_error(text: str) -> None:
    try:
        found = parse_cgroup(text)
    except ParseError:
        return
    assert found is None or _well_formed(found)


_PART = st.sampled_from(
    ["kubepods", "kubepods.slice", "burstable", f"pod{UID}", "docker", cid(5), "x.scope"]
    + [f"{p}{cid(5)}.scope" for p in ("docker-", "crio-", "libpod-", "cri-containerd-")]
    + ["lxc", "lxc.payload", "lxc.payload.web", "payload", "machine-web.scope", "default"]
) | st.text(alphabet="abcdef0123456789-_.", max_size=70)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PART, max_size=8))
def test_any_path_of_plausible_parts_names_a_well_formed_container_or_none(
    parts: list[str],
) -> None:
    found = parse_cgroup_path("/" + "/".join(parts))
    if found is not None:
        assert _well_formed(found)
        assert found.runtime in (
            *("docker", "containerd", "cri-o", "podman", "kubernetes", "lxc", "systemd-nspawn"),
            "",  # a bare id: the runtime that lists it says which
        )
        assert found.container_id in "/".join(parts)
