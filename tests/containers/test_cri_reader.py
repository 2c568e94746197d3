"""Names from the CRI runtime itself: a real gRPC server on a unix socket answers as
containerd does; the host door's `cri_look` asks it within one second, keeps only what the
parser reads, and a recording replays the same containers. A socket that is absent, silent
or answers garbage is one note, and the rest of the look goes on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelhost.containers.cri_answers import parse_cri_look
from accelhost.containers.model import EXITED, NO_RUNTIME_NOTE, RUNNING
from accelhost.containers.reader import CRI_SOCKETS, NOT_CRI, cri_endpoints, read_containers
from accelhost.host.live import LiveHost
from accelhost.host.record import RecordingHost
from accelhost.host.snapshot import SnapshotHost
from accelhost.readers.procs import ProcessInfo
from container_hosts import cid, on_host, put_in_container
from cri_server import (
    SECRET_ENV,
    FakeContainer,
    FakeCri,
    FakePod,
    cri_server,
    garbage_socket,
    silent_socket,
)
from fakehost import FakeMachine

UID = "8d3c6a2e-1b4f-4e5a-9c7d-0a1b2c3d4e5f"
NOW = 1_796_100_000.0
SANDBOX, CRASHED, LIVE = cid(0x20), cid(0x21), cid(0x22)


def story() -> FakeCri:
    """A vLLM pod whose engine crashed once: attempt 0 exited, attempt 1 serving."""
    pod = FakePod(SANDBOX, "vllm-0", "serving", UID)
    dshm = [("/dev/shm", f"/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~empty-dir/dshm")]
    return FakeCri(
        pods=[pod],
        containers=[
            FakeContainer(
                CRASHED, pod, "engine", 0, False, 1_796_000_100, 1_796_000_400, 0, mounts=dshm
            ),
            FakeContainer(LIVE, pod, "engine", 1, True, 1_796_000_410, 0, 4242, mounts=dshm),
        ],
    )


@pytest.fixture
def runtime() -> Iterator[tuple[FakeCri, str]]:
    fake = story()
    with cri_server(fake) as path:
        yield fake, path


class LiveCri(SnapshotHost):
    """A recorded machine (processes, cgroups, namespaces) whose CRI sockets are real."""

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        return LiveHost().cri_look(endpoint)


def proc(pid: int, cmd: str, start: int = 100) -> ProcessInfo:
    return ProcessInfo(pid, 1, pid, pid, "S", cmd.split()[0][:15], tuple(cmd.split()), start)


def pod_machine(env: dict[str, str] | None = None) -> tuple[FakeMachine, dict[int, ProcessInfo]]:
    """The live attempt's engine and the pause process, in their kubepods cgroups."""
    m = FakeMachine(env=dict(env or {}))
    on_host(m, 1)
    put_in_container(
        m, 4242, f"/kubepods/besteffort/pod{UID}/{LIVE}", ipc=4026532900, nspid=(4242, 1)
    )
    put_in_container(
        m, 4100, f"/kubepods/besteffort/pod{UID}/{SANDBOX}", ipc=4026532900, nspid=(4100, 1)
    )
    procs = {
        1: proc(1, "/sbin/init"),
        4100: proc(4100, "/pause"),
        4242: proc(4242, "python3 -m vllm.entrypoints.openai.api_server"),
    }
    return m, procs


def test_the_door_asks_a_real_runtime_and_keeps_only_what_is_read(runtime: Any) -> None:
    fake, path = runtime
    for endpoint in (path, "unix://" + path):
        answer = LiveHost().cri_look(endpoint)
        assert answer is not None and "error" not in answer
        assert answer["version"]["runtime_name"] == "containerd"
        assert [s["id"] for s in answer["sandboxes"]] == [SANDBOX]
        assert sorted(answer["statuses"]) == sorted([CRASHED, LIVE])
        assert answer["statuses"][LIVE]["pid"] == 4242
        text = json.dumps(answer)
        # the OCI spec (the environment), annotations and other teams' labels stay out
        assert SECRET_ENV.split("=")[1] not in text and '"team"' not in text
    # ContainerStatus was asked verbose for each container; nothing else after the lists
    assert fake.calls.count("ContainerStatus") == 4 and fake.calls.count("Version") == 2


def test_the_answers_become_containers_with_pods_attempts_and_sandboxes(runtime: Any) -> None:
    _fake, path = runtime
    got = parse_cri_look(path, LiveHost().cri_look(path))
    assert got is not None and got.answered and got.runtime == "containerd"
    assert got.version == "containerd 1.6.20" and got.pids == {LIVE: 4242}
    crashed, live, box = got.containers[CRASHED], got.containers[LIVE], got.containers[SANDBOX]
    assert (crashed.name, crashed.attempt, crashed.state) == ("engine", 0, EXITED)
    assert (live.name, live.attempt, live.state) == ("engine", 1, RUNNING)
    assert crashed.started == 1_796_000_100.25 and crashed.finished == 1_796_000_400.0
    assert live.finished is None and live.image == "vllm/vllm-openai:v0.32"
    for c in (crashed, live, box):
        assert c.pod is not None and (c.pod.namespace, c.pod.name, c.pod.uid) == (
            "serving",
            "vllm-0",
            UID,
        )
        assert c.sandbox_id == SANDBOX
    assert box.is_sandbox and not live.is_sandbox and box.name == "POD" and box.state == RUNNING


def test_the_reader_names_a_pods_attempts_from_the_runtime(runtime: Any) -> None:
    _fake, path = runtime
    m, procs = pod_machine()
    view = read_containers(LiveCri(m.snapshot()), procs, NOW, cri_sockets=[path])
    live = view.of_pid(4242)
    assert live is not None and live.id == LIVE and live.attempt == 1
    # named by the runtime that answered, as its exited attempt is (not the cgroup's word)
    assert live.label == f"engine (containerd {LIVE[:12]}, pod serving/vllm-0)"
    assert view.containers[CRASHED].state == EXITED  # no process: the runtime's record
    assert view.containers[CRASHED].runtime == live.runtime
    pause = view.of_pid(4100)
    assert pause is not None and pause.is_sandbox
    assert path in view.runtimes and view.notes == ()
    assert {c.id for c in view.find("serving/vllm-0")} == {SANDBOX, CRASHED, LIVE}


def test_container_runtime_endpoint_is_read_as_crictl_reads_it(runtime: Any) -> None:
    _fake, path = runtime
    m, procs = pod_machine({"CONTAINER_RUNTIME_ENDPOINT": "unix://" + path})
    host = LiveCri(m.snapshot())
    assert cri_endpoints(host, ["/run/k3s/containerd/containerd.sock", path]) == [
        (path, True),
        ("/run/k3s/containerd/containerd.sock", True),
        *((p, False) for p in CRI_SOCKETS),
    ]
    view = read_containers(host, procs, NOW)
    c = view.of_pid(4242)
    assert c is not None and c.name == "engine" and view.runtimes == (path,)
    # named but not there: one note, the runtime that answered still names
    view = read_containers(host, procs, NOW, cri_sockets=["/run/k3s/containerd/containerd.sock"])
    assert view.notes == ("CRI socket /run/k3s/containerd/containerd.sock: no such socket",)
    assert view.of_pid(4242) is not None and view.of_pid(4242).name == "engine"  # type: ignore[union-attr]


def test_a_silent_socket_is_one_note_and_costs_one_deadline() -> None:
    m, procs = pod_machine()
    with silent_socket() as path:
        answer = LiveHost().cri_look(path)
        assert answer == {"error": "no answer within 1 s"}
        view = read_containers(LiveCri(m.snapshot()), procs, NOW, cri_sockets=[path])
    assert view.notes == (f"CRI socket {path}: no answer within 1 s", NO_RUNTIME_NOTE)
    c = view.of_pid(4242)  # the cgroup still says which container and pod
    assert c is not None and c.id == LIVE and c.pod is not None and c.pod.uid == UID


def test_garbage_a_wrong_service_and_a_plain_file_are_said_as_such(tmp_path: Path) -> None:
    with garbage_socket() as path:
        assert LiveHost().cri_look(path) == {
            "error": "answers something that is not the CRI's gRPC"
        }
    with garbage_socket(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n") as path:
        # Docker's API socket named as a CRI one
        assert LiveHost().cri_look(path) == {
            "error": "answers something that is not the CRI's gRPC"
        }
    with cri_server(story(), service="runtime.v1alpha2.RuntimeService") as path:
        assert LiveHost().cri_look(path) == {"error": NOT_CRI}
    plain = tmp_path / "not.sock"
    plain.write_text("x")
    assert LiveHost().cri_look(str(plain)) == {"error": "not a socket"}
    assert LiveHost().cri_look(str(tmp_path / "absent.sock")) is None
    assert LiveHost().cri_look("tcp://127.0.0.1:1") == {"error": "not a unix socket endpoint"}


def test_a_usual_socket_that_is_not_a_cri_runtime_says_nothing() -> None:
    """Docker's own containerd (CRI plugin off) sits at the usual path on every Docker
    host: it is no news there; named by the user, it is."""
    m, procs = pod_machine()
    m.cri[CRI_SOCKETS[0]] = {"error": NOT_CRI}
    m.cri["/run/other.sock"] = {"error": NOT_CRI}
    view = read_containers(m.host(), procs, NOW, cri_sockets=["/run/other.sock"])
    assert view.notes == (f"CRI socket /run/other.sock: {NOT_CRI}", NO_RUNTIME_NOTE)


def test_a_recording_replays_the_same_containers_without_secrets(runtime: Any) -> None:
    _fake, path = runtime
    m, procs = pod_machine()
    rec = RecordingHost(LiveCri(m.snapshot()))
    seen = read_containers(rec, procs, NOW, cri_sockets=[path])
    snap = json.loads(json.dumps(rec.to_snapshot()))
    assert list(snap["cri"]) == [path, *(p for p in CRI_SOCKETS if p in snap["cri"])]
    assert "hf_do_not_record" not in json.dumps(snap)
    replayed = read_containers(SnapshotHost(snap), procs, NOW, cri_sockets=[path])
    assert replayed.containers == seen.containers and replayed.notes == seen.notes
    assert replayed.runtimes == seen.runtimes == (path,)


def test_a_snapshots_cri_section_of_a_wrong_shape_is_refused() -> None:
    from accelhost.errors import SnapshotError

    bad = FakeMachine().snapshot()
    bad["cri"] = {"/run/containerd/containerd.sock": "text"}
    with pytest.raises(SnapshotError, match="'cri' must map endpoints to objects"):
        SnapshotHost(bad)


def test_cri_answers_of_any_shape_never_raise() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=25,
    )
    keys = st.sampled_from(["version", "sandboxes", "containers", "statuses", "error"])
    ids = st.sampled_from([cid(1), cid(2), "x", ""])
    item = st.dictionaries(
        st.sampled_from(
            [
                "id",
                "sandbox_id",
                "name",
                "uid",
                "namespace",
                "state",
                "attempt",
                "labels",
                "started_at",
                "pid",
            ]
        ),
        json_values | ids,
        max_size=8,
    )

    @settings(max_examples=300, deadline=None)
    @given(
        st.dictionaries(keys, json_values | st.lists(item, max_size=3), max_size=5) | json_values
    )
    def check(value: Any) -> None:
        parse_cri_look("/run/x.sock", value)

    check()
