"""One look at a recorded host's containers: names from a runtime that answers, the cgroup's
id (said once) when none does, pods from their cgroup and labels, exited and removed
containers from the runtime's records and events."""

from __future__ import annotations

import json

from accelhost.containers.docker_api import events_path, parse_time
from accelhost.containers.model import NO_RUNTIME_NOTE
from accelhost.containers.reader import (
    events_window,
    read_containers,
    runtime_sockets,
)
from accelhost.readers.procs import ProcessInfo
from container_hosts import (
    DOCKER_SOCK,
    HOST_IPC,
    SHAPES,
    cid,
    docker_answers,
    event,
    on_host,
    put_in_container,
)
from fakehost import FakeMachine

NOW = 1_796_000_000.0
UID = "8d3c6a2e-1b4f-4e5a-9c7d-0a1b2c3d4e5f"


def proc(pid: int, cmd: str, ppid: int = 1, start: int = 100) -> ProcessInfo:
    return ProcessInfo(pid, ppid, pid, pid, "S", cmd.split()[0][:15], tuple(cmd.split()), start)


def two_containers() -> tuple[FakeMachine, dict[int, ProcessInfo]]:
    """bash as PID 1 of one container (host IPC), accelhost run as PID 1 of another
    (private IPC), a host process beside them."""
    m = FakeMachine()
    procs = {
        1: proc(1, "/sbin/init"),
        500: proc(500, "sshd"),
        1000: proc(1000, "bash -lc vllm serve /models/tiny", start=200),
        1001: proc(1001, "vllm serve /models/tiny", ppid=1000, start=210),
        1002: proc(1002, "VLLM::EngineCore", ppid=1001, start=220),
        2000: proc(2000, "accelhost run -- vllm serve /models/tiny", start=300),
        2001: proc(2001, "vllm serve /models/tiny", ppid=2000, start=310),
    }
    on_host(m, 1)
    on_host(m, 500)
    for pid, inner in ((1000, 1), (1001, 7), (1002, 9)):
        put_in_container(m, pid, SHAPES["docker-systemd"].format(c=cid(1)), nspid=(pid, inner))
    for pid, inner in ((2000, 1), (2001, 5)):
        put_in_container(
            m, pid, f"/docker/{cid(2)}", ipc=4026532500, pid_ns=4026532501, nspid=(pid, inner)
        )
    return m, procs


CONTAINERS = [
    {"id": cid(1), "name": "vllm-bash", "pid": 1000, "ipc": "host"},
    {
        "id": cid(2),
        "name": "vllm-safe",
        "pid": 2000,
        "ipc": "private",
        "path": "accelhost",
        "args": ["run", "--", "vllm", "serve", "/models/tiny"],
    },
    {
        "id": cid(3),
        "name": "vllm-old",
        "state": "exited",
        "started": "2026-12-01T08:00:00Z",
        "finished": "2026-12-01T09:00:00.5Z",
    },
]


def test_a_runtime_that_answers_names_every_container() -> None:
    m, procs = two_containers()
    removed = cid(4)
    path = events_path(*events_window(NOW))
    events = [
        event("start", removed, "vllm-removed", NOW - 3000),
        event("die", removed, "vllm-removed", NOW - 2000),
        event("destroy", removed, "vllm-removed", NOW - 1999),
    ]
    docker_answers(m.http, CONTAINERS, events, path)
    view = read_containers(m.host(), procs, NOW)
    assert view.runtimes == (DOCKER_SOCK,) and view.notes == ()
    bash = view.of_pid(1002)
    assert bash is not None
    assert (bash.name, bash.runtime, bash.state, bash.ipc_mode) == (
        "vllm-bash",
        "docker",
        "running",
        "host",
    )
    assert bash.pid1_command == "bash -lc vllm serve /models/tiny"  # its NSpid says 1
    assert bash.shares_host_ipc is True
    assert bash.started == parse_time("2026-12-01T10:00:00.123456789Z")
    safe = view.of_pid(2001)
    assert safe is not None and safe.name == "vllm-safe" and safe.shares_host_ipc is False
    assert safe.pid1_command == "accelhost run -- vllm serve /models/tiny"
    assert view.of_pid(500) is None and view.of_pid(1) is None
    old = view.containers[cid(3)]
    assert old.state == "exited" and old.finished == parse_time("2026-12-01T09:00:00.5Z")
    gone = view.containers[removed]
    assert (gone.name, gone.state, gone.started, gone.finished) == (
        "vllm-removed",
        "gone",
        NOW - 3000,
        NOW - 2000,
    )
    assert view.pids_of(cid(1)) == [1000, 1001, 1002]
    assert [c.name for c in view.find("vllm-bash")] == ["vllm-bash"]
    assert [c.name for c in view.find(cid(2)[:12])] == ["vllm-safe"]
    assert view.find("nothing-like-it") == []
    as_json = json.loads(json.dumps(bash.to_dict()))
    assert as_json["name"] == "vllm-bash" and as_json["pod"] is None


def test_a_running_container_whose_processes_are_not_seen_stays_running() -> None:
    """The runtime says running; no process of it is seen (a cgroup shape the parser does
    not know, such as Quadlet's `libpod-payload-<id>`, or a reader outside the host's PID
    namespace). Called exited, it would take the blame for files born while it ran."""
    m, procs = two_containers()
    unseen = {"id": cid(5), "name": "vllm-quadlet", "pid": 3000, "ipc": "host"}
    docker_answers(m.http, [*CONTAINERS, unseen], [], events_path(*events_window(NOW)))
    view = read_containers(m.host(), procs, NOW)
    c = view.containers[cid(5)]
    assert (c.name, c.state) == ("vllm-quadlet", "running") and view.pids_of(cid(5)) == []


def test_without_a_runtime_the_cgroup_id_is_the_answer_said_once() -> None:
    m, procs = two_containers()
    view = read_containers(m.host(), procs, NOW)
    assert view.runtimes == () and view.notes == (NO_RUNTIME_NOTE,)
    c = view.of_pid(1001)
    assert c is not None and c.name is None and c.id == cid(1) and c.runtime == "docker"
    assert c.label == f"name unknown (docker {cid(1)[:12]})"
    assert c.pid1_command == "bash -lc vllm serve /models/tiny"  # from /proc, not a runtime


def test_a_runtime_answering_garbage_leaves_names_unknown() -> None:
    m, procs = two_containers()
    m.http[f"{DOCKER_SOCK} /containers/json?all=1"] = "<html>not docker</html>"
    view = read_containers(m.host(), procs, NOW)
    assert view.notes == (NO_RUNTIME_NOTE,)
    c = view.of_pid(1002)
    assert c is not None and c.name is None


def test_a_host_without_containers_says_nothing() -> None:
    m = FakeMachine()
    on_host(m, 1)
    view = read_containers(m.host(), {1: proc(1, "/sbin/init")}, NOW)
    assert view.containers == {} and view.notes == () and view.host_ipc == HOST_IPC


def test_docker_host_and_the_explicit_socket_come_first() -> None:
    m = FakeMachine(
        env={"DOCKER_HOST": "unix:///tmp/test-daemon/docker.sock", "XDG_RUNTIME_DIR": "/run/user/7"}
    )
    assert runtime_sockets(m.host(), ["/srv/d.sock"]) == [
        "/srv/d.sock",
        "/tmp/test-daemon/docker.sock",
        "/var/run/docker.sock",
        "/run/podman/podman.sock",
        "/run/user/7/podman/podman.sock",
    ]
    tcp = FakeMachine(env={"DOCKER_HOST": "tcp://10.0.0.1:2375"})  # not a unix socket: skipped
    assert runtime_sockets(tcp.host()) == ["/var/run/docker.sock", "/run/podman/podman.sock"]


def test_a_podman_socket_names_podman_containers() -> None:
    m = FakeMachine()
    on_host(m, 1)
    put_in_container(m, 3000, SHAPES["podman-machine"].format(c=cid(6)), nspid=(3000, 1))
    docker_answers(
        m.http, [{"id": cid(6), "name": "pm", "pid": 3000}], sock="/run/podman/podman.sock"
    )
    view = read_containers(m.host(), {1: proc(1, "init"), 3000: proc(3000, "tini -- x")}, NOW)
    c = view.of_pid(3000)
    assert c is not None and (c.runtime, c.name) == ("podman", "pm")
    assert view.runtimes == ("/run/podman/podman.sock",)


def test_a_container_podman_removed_is_named_from_podmans_own_events() -> None:
    """Podman's compatible API says `died` and `remove` where Docker says `die` and
    `destroy`, and filters by its own names: read as Docker's, its removal names it."""
    m = FakeMachine()
    on_host(m, 1)
    sock, gone = "/run/podman/podman.sock", cid(7)
    path = events_path(*events_window(NOW), "podman")
    assert "remove" in path and "died" in path and path != events_path(*events_window(NOW))
    events = [
        event("start", gone, "pm-old", NOW - 3000),
        event("died", gone, "pm-old", NOW - 2000),
        event("remove", gone, "pm-old", NOW - 1999),
    ]
    docker_answers(m.http, [], events, path, sock=sock)
    view = read_containers(m.host(), {1: proc(1, "init")}, NOW)
    c = view.containers[gone]
    assert (c.runtime, c.name, c.state, c.started, c.finished) == (
        "podman",
        "pm-old",
        "gone",
        NOW - 3000,
        NOW - 2000,
    )


def cri_answer(
    *containers: dict[str, object], sandboxes: tuple[dict[str, object], ...] = ()
) -> dict[str, object]:
    """What `Host.cri_look` returns for a containerd with these containers (a snapshot's
    "cri" section); `statuses` from each container's `started_at` / `finished_at`."""
    statuses = {
        str(c["id"]): {k: c[k] for k in ("started_at", "finished_at", "pid") if k in c}
        for c in containers
    }
    return {
        "version": {"runtime_name": "containerd", "runtime_version": "1.6.20"},
        "sandboxes": list(sandboxes),
        "containers": [{k: v for k, v in c.items() if not k.endswith("_at")} for c in containers],
        "statuses": statuses,
    }


def test_kubernetes_pods_from_the_cgroup_and_the_cri() -> None:
    m = FakeMachine()
    on_host(m, 1)
    shape = SHAPES["containerd-k8s-systemd"].format(c=cid(8), u_=UID.replace("-", "_"))
    put_in_container(m, 4000, shape, ipc=4026532900, nspid=(4000, 1))
    procs = {1: proc(1, "init"), 4000: proc(4000, "python3 -m vllm.entrypoints.openai.api_server")}
    bare = read_containers(m.host(), procs, NOW)
    c = bare.of_pid(4000)
    assert c is not None and c.pod is not None and c.pod.uid == UID and c.pod.name is None
    assert c.runtime == "containerd" and bare.notes == (NO_RUNTIME_NOTE,)
    labels = {
        "io.kubernetes.pod.name": "vllm-0",
        "io.kubernetes.pod.namespace": "serving",
        "io.kubernetes.pod.uid": UID,
    }
    started = parse_time("2026-12-01T11:00:00Z")
    assert started is not None
    m.cri["/run/containerd/containerd.sock"] = cri_answer(
        {
            "id": cid(8),
            "name": "engine",
            "attempt": 1,
            "image": "vllm/vllm-openai:v0.32",
            "state": "CONTAINER_RUNNING",
            "labels": labels,
            "started_at": int(started) * 1_000_000_000,
            "finished_at": 0,
        }
    )
    view = read_containers(m.host(), procs, NOW)
    c = view.of_pid(4000)
    assert c is not None and c.name == "engine" and c.pod is not None and c.attempt == 1
    assert (c.pod.namespace, c.pod.name, c.pod.uid) == ("serving", "vllm-0", UID)
    assert c.started == started and c.finished is None
    assert view.runtimes == ("/run/containerd/containerd.sock",) and view.notes == ()
    assert [x.id for x in view.find("serving/vllm-0")] == [cid(8)]


def test_a_recording_keeps_only_what_is_read_and_replays_the_same_view() -> None:
    from accelhost.containers.docker_api import trim_answer
    from accelhost.host.redact import recorder
    from accelhost.host.snapshot import SnapshotHost

    m, procs = two_containers()
    path = events_path(*events_window(NOW))
    gone = cid(4)
    events = [event("start", gone, "r", NOW - 30), event("destroy", gone, "r", NOW - 20)]
    containers = [
        dict(CONTAINERS[0], args=["-lc", "vllm serve /m --api-key sk-secret"]),
        *CONTAINERS[1:],
    ]
    docker_answers(m.http, containers, events, path)
    inspect_key = f"{DOCKER_SOCK} /containers/{cid(1)}/json"
    raw = json.loads(m.http[inspect_key])
    raw["Config"]["Env"] = ["HF_TOKEN=hf_secret"]
    raw["Config"]["Labels"] = {"io.kubernetes.pod.name": "p", "team.secret": "x"}
    m.http[inspect_key] = json.dumps(raw)
    rec = recorder(m.host(), http_filter=trim_answer)
    live_view = read_containers(rec, procs, NOW)
    snap = json.loads(json.dumps(rec.to_snapshot()))
    text = json.dumps(snap["http"])
    assert "hf_secret" not in text and "sk-secret" not in text and "team.secret" not in text
    replayed = read_containers(SnapshotHost(snap), procs, NOW)
    assert replayed.containers == live_view.containers
    assert replayed.containers[gone].state == "gone"


def test_runtime_answers_of_any_shape_never_raise() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from accelhost.containers import docker_api

    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        ),
        max_leaves=20,
    )

    @settings(max_examples=200, deadline=None)
    @given(json_values, st.text(max_size=200))
    def check(value: object, text: str) -> None:
        body = json.dumps(value)
        for t in (body, text):
            docker_api.parse_container_list(t)
            docker_api.parse_inspect(t)
            docker_api.parse_events(t)
            docker_api.trim_answer("/containers/json?all=1", t)
            docker_api.trim_answer("/events?x", t)

    check()


def test_when_pid1s_links_are_hidden_a_host_process_gives_the_hosts_ipc() -> None:
    """A sandbox's init holds capabilities even root lacks: its ns links cannot be read."""
    m, procs = two_containers()
    del m.links["/proc/1/ns/ipc"]
    view = read_containers(m.host(), procs, NOW)
    assert view.host_ipc == HOST_IPC
    c = view.of_pid(1001)
    assert c is not None and c.shares_host_ipc is True


def test_a_runtime_that_stops_answering_is_asked_nothing_more() -> None:
    """Listing answered, the first inspect not: no more inspects (each costs up to a
    second on a live socket); the listing's names stand. The events were asked before the
    inspects: a removed container is named even when an inspect is slow."""
    from fakehost import CountingHost

    m, procs = two_containers()
    path = events_path(*events_window(NOW))
    docker_answers(m.http, CONTAINERS, [], path)
    del m.http[f"{DOCKER_SOCK} /containers/{cid(1)}/json"]
    host = CountingHost(m.host())
    view = read_containers(host, procs, NOW)
    asked = [k for k in host.http if k.startswith(DOCKER_SOCK)]
    assert asked == [
        f"{DOCKER_SOCK} /containers/json?all=1",
        f"{DOCKER_SOCK} {path}",
        f"{DOCKER_SOCK} /containers/{cid(1)}/json",
    ]
    c = view.of_pid(1001)
    assert c is not None and c.name == "vllm-bash" and c.ipc_mode is None


def test_a_bare_id_under_a_custom_parent_is_the_container_its_runtime_lists() -> None:
    """`docker run --cgroup-parent=/engines` (cgroupfs) leaves `/engines/<id>`: the same
    shape as nerdctl's or a CRI's with a parent of their own. The runtime that lists the id
    says which; where none does, it stays a host process (the runtime would be a guess),
    and no namespace of it is read as a container's."""
    m = FakeMachine()
    on_host(m, 1)
    for pid, n in ((5000, 0x44), (5001, 0x55)):
        put_in_container(m, pid, f"/engines/{cid(n)}", ipc=4026532950 + n, nspid=(pid, 1))
    procs = {1: proc(1, "init"), 5000: proc(5000, "vllm serve /m"), 5001: proc(5001, "vllm x")}
    alone = read_containers(m.host(), procs, NOW)
    assert alone.pid_container == {} and alone.containers == {} and alone.namespaces == {}
    assert alone.notes == ()  # no container seen: nothing to say about names
    docker_answers(m.http, [{"id": cid(0x44), "name": "vllm-parent", "pid": 5000}])
    view = read_containers(m.host(), procs, NOW)
    c = view.of_pid(5000)
    assert c is not None and (c.runtime, c.id, c.name) == ("docker", cid(0x44), "vllm-parent")
    assert view.of_pid(5001) is None and set(view.namespaces) == {5000}
    # a CRI lists it: that runtime's word (a kubelet with its own cgroup parent)
    m.cri["/var/run/crio/crio.sock"] = dict(
        cri_answer({"id": cid(0x55), "name": "engine", "labels": {}}),
        version={"runtime_name": "cri-o", "runtime_version": "1.28.1"},
    )
    c = read_containers(m.host(), procs, NOW).of_pid(5001)
    assert c is not None and (c.runtime, c.name) == ("cri-o", "engine")


def test_lxc_and_nspawn_containers_are_named_by_their_cgroup_without_a_runtime() -> None:
    m = FakeMachine()
    on_host(m, 1)
    put_in_container(m, 6000, "/lxc.payload.web/system.slice/vllm.service", nspid=(6000, 40))
    put_in_container(m, 6001, "/machine.slice/machine-db.scope/payload/init.scope", nspid=(6001, 1))
    procs = {1: proc(1, "init"), 6000: proc(6000, "vllm serve"), 6001: proc(6001, "/sbin/init")}
    view = read_containers(m.host(), procs, NOW)
    lxc, nspawn = view.of_pid(6000), view.of_pid(6001)
    assert lxc is not None and (lxc.runtime, lxc.id, lxc.name) == ("lxc", "web", "web")
    assert nspawn is not None and (nspawn.runtime, nspawn.name) == ("systemd-nspawn", "db")
    assert lxc.label == "web (lxc web)" and view.notes == ()  # every name is known
    assert [c.id for c in view.find("db")] == ["db"]


def test_a_container_id_with_a_trailing_newline_is_no_id() -> None:
    """Docker's and the CRI's answers are held to one rule (64 lowercase hex, nothing else):
    `^...$` alone would let a trailing newline through."""
    from accelhost.containers import docker_api

    cid = "a" * 64
    listed = docker_api.parse_container_list(json.dumps([{"Id": cid}, {"Id": cid + "\n"}]))
    assert listed is not None and [c.id for c in listed] == [cid]
    assert docker_api.parse_inspect(json.dumps({"Id": cid + "\n"})) is None
