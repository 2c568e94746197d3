"""Every runtime's cgroup shape names its container; host processes are in none; any text
either parses or raises ParseError (never anything else)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelhost.containers.cgroup import MAX_CGROUP_TEXT, parse_cgroup, parse_cgroup_path
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
    assert found is not None and found.runtime == "docker" and found.short_id == cid(9)[:12]


@pytest.mark.parametrize("text", ["garbage\n", "x::/docker\n", "0:cpu\n", "0::relative\n"])
def test_text_that_is_no_cgroup_file_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError, match="/proc/7/cgroup"):
        parse_cgroup(text, "/proc/7/cgroup")


def test_far_too_long_text_is_refused_unread() -> None:
    with pytest.raises(ParseError, match="no cgroup file is that long"):
        parse_cgroup("0::/\n" * (MAX_CGROUP_TEXT // 4))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_any_text_parses_or_raises_parse_error(text: str) -> None:
    try:
        found = parse_cgroup(text)
    except ParseError:
        return
    assert found is None or len(found.container_id) == 64


_PART = st.sampled_from(
    ["kubepods", "kubepods.slice", "burstable", f"pod{UID}", "docker", cid(5), "x.scope"]
    + [f"{p}{cid(5)}.scope" for p in ("docker-", "crio-", "libpod-", "cri-containerd-")]
) | st.text(alphabet="abcdef0123456789-_.", max_size=70)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PART, max_size=8))
def test_any_path_of_plausible_parts_names_a_well_formed_container_or_none(
    parts: list[str],
) -> None:
    found = parse_cgroup_path("/" + "/".join(parts))
    if found is not None:
        assert len(found.container_id) == 64
        assert found.runtime in ("docker", "containerd", "cri-o", "podman", "kubernetes")
        assert found.container_id in "/".join(parts)
