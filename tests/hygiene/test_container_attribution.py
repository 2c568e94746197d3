"""Who left a leftover, said only as far as it is known: a pod's crashed attempt (a new
container per restart, as Kubernetes makes them) named by its own lifetime, not by the
live attempt beside it; a removed container whose IPC mode the events do not give, and a
host engine that ran at the file's birth, only as possible authors, which no
`--container` scope removes for."""

from __future__ import annotations

import json
from typing import Any

from container_story import container_story, rfc3339, story_snapshot
from hygiene_fakes import NOW, FakeHost

from accelhost.host.snapshot import SnapshotHost
from accelhost.hygiene import HygieneOptions, read_facts, run_checks
from accelhost.hygiene.clean.cleaner import RemoveShmFile, plan_clean
from accelhost.hygiene.engines import build_catalog, parse_catalog_file
from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.judge.attribution import Attribution
from accelhost.hygiene.judge.containers import scope_actions
from accelhost.hygiene.judge.findings import find
from container_hosts import SHAPES, cid, docker_answers, on_host, put_in_container

OPTS = HygieneOptions()
UID = "8d3c6a2e-1b4f-4e5a-9c7d-0a1b2c3d4e5f"
SANDBOX, CRASHED, LIVE = cid(0x61), cid(0x62), cid(0x63)
POD_IPC = 4026532900
POD_SHM = "/proc/5000/root/dev/shm"


def _pod_host(crashed_times: bool = True, engine: str = "vllm serve /models/tiny") -> FakeHost:
    """A pod run by the kubelet through Docker: its sandbox, the engine's attempt 0 that
    crashed (exited, kept by the kubelet) and attempt 1 running now. The pod's /dev/shm
    holds a file of each attempt, none held, and one born before either ran."""
    from container_story import record_shm_dir

    fake = FakeHost()
    on_host(fake, 1)
    shape = SHAPES["k8s-cgroupfs"]
    for pid, c, cmd in ((5000, SANDBOX, "/pause"), (5100, LIVE, engine)):
        fake.proc(pid, cmd, ppid=1, pgid=pid, sid=pid, start_s=6000 + pid / 100)
        put_in_container(fake, pid, shape.format(c=c, u=UID), ipc=POD_IPC, pid_ns=4026533000 + pid)
    record_shm_dir(fake, "/dev/shm", [], 26)
    record_shm_dir(
        fake,
        POD_SHM,
        [
            ("psm_before01", 4096, 1, NOW - 9000, 11),  # before any attempt ran
            ("psm_crash001", 4096, 1, NOW - 2000, 12),  # attempt 0 ran then
            ("psm_live0001", 4096, 1, NOW - 1000, 13),  # attempt 1 runs since NOW - 1400
        ],
        300,
    )
    labels = {
        "io.kubernetes.pod.name": "vllm-0",
        "io.kubernetes.pod.namespace": "team-a",
        "io.kubernetes.pod.uid": UID,
    }
    crashed: dict[str, Any] = {
        "id": CRASHED, "name": "k8s_engine_vllm-0_team-a_0", "state": "exited",
        "ipc": f"container:{SANDBOX}", "labels": labels,
        "started": rfc3339(NOW - 3000), "finished": rfc3339(NOW - 1500),
    }  # fmt: skip
    if not crashed_times:  # the runtime no longer says when it ran
        crashed.update(started="0001-01-01T00:00:00Z", finished="0001-01-01T00:00:00Z")
    docker_answers(
        fake.http,
        [
            {"id": SANDBOX, "name": "k8s_POD_vllm-0_team-a_0", "pid": 5000, "ipc": "shareable",
             "path": "/pause", "args": [], "labels": labels, "started": rfc3339(NOW - 9500)},
            crashed,
            {"id": LIVE, "name": "k8s_engine_vllm-0_team-a_1", "pid": 5100,
             "ipc": f"container:{SANDBOX}", "labels": labels, "started": rfc3339(NOW - 1400)},
        ],
    )  # fmt: skip
    return fake


def _left_by(facts: HostFacts, opts: HygieneOptions = OPTS) -> dict[str, dict[str, Any]]:
    check = run_checks(facts, opts, ("posix_shm",)).checks[0]
    return {e["path"].rsplit("/", 1)[-1]: e["left_by"] for e in check.evidence}


def _ids(left_by: dict[str, Any]) -> list[str]:
    return [c["id"] for c in left_by["containers"]]


def _scoped(facts: HostFacts, wanted: str, opts: HygieneOptions = OPTS) -> set[str]:
    att = find(facts, opts).attribution
    actions = scope_actions(plan_clean(facts, opts), att, att.resolve(wanted))
    return {a.path.rsplit("/", 1)[-1] for a in actions if isinstance(a, RemoveShmFile)}


def test_a_pods_crashed_attempt_is_named_by_its_lifetime_not_the_live_one() -> None:
    facts = read_facts(_pod_host().host(), OPTS)
    left = _left_by(facts)
    assert _ids(left["psm_crash001"]) == [CRASHED]  # not the live attempt beside it
    assert left["psm_crash001"]["ambiguous"] is False
    assert left["psm_crash001"]["containers"][0]["state"] == "exited"
    assert "born while k8s_engine_vllm-0_team-a_0" in left["psm_crash001"]["why"]
    assert _ids(left["psm_live0001"]) == [LIVE] and left["psm_live0001"]["ambiguous"] is False
    # born before either attempt ran: an attempt the runtime no longer lists may have left
    # it; both are named, neither as certain
    before = left["psm_before01"]
    assert sorted(_ids(before)) == sorted([LIVE, CRASHED])
    assert before["ambiguous"] is True and before["others_possible"] is True
    assert "no lifetime known covers its birth: cannot tell who" in before["why"]
    # clean --container: each attempt's own, by its id; the pod's both attempts' files,
    # never the one nobody can tell
    assert _scoped(facts, CRASHED[:12]) == {"psm_crash001"}
    assert _scoped(facts, LIVE[:12]) == {"psm_live0001"}
    assert _scoped(facts, "team-a/vllm-0") == {"psm_crash001", "psm_live0001"}


def test_an_attempt_whose_lifetime_is_unknown_is_never_named_as_certain() -> None:
    """The runtime no longer says when attempt 0 ran: a file born before attempt 1 started
    may be attempt 0's or an attempt no longer listed; one born since, either attempt's."""
    facts = read_facts(_pod_host(crashed_times=False).host(), OPTS)
    left = _left_by(facts)
    for name in ("psm_crash001", "psm_before01"):
        assert _ids(left[name]) == [CRASHED], name
        assert left[name]["ambiguous"] is True and left[name]["others_possible"] is True
        assert "no lifetime known covers its birth: cannot tell who" in left[name]["why"]
    live = left["psm_live0001"]
    assert sorted(_ids(live)) == sorted([LIVE, CRASHED])
    assert live["ambiguous"] is True and live["others_possible"] is False
    assert "2 containers share it, cannot tell which" in live["why"]
    assert _scoped(facts, LIVE[:12]) == set() and _scoped(facts, CRASHED[:12]) == set()
    assert _scoped(facts, "team-a/vllm-0") == {"psm_live0001"}


def test_a_removed_container_of_unknown_ipc_mode_only_may_have_left_a_file() -> None:
    """vllm-rmf is known only from the events (no HostConfig.IpcMode): a private /dev/shm
    could not have held what lies in the host's. It is named as a possible author, and
    `clean --container vllm-rmf` removes none of it (a plain `clean` still does)."""
    facts = read_facts(SnapshotHost(story_snapshot()), OPTS)
    left = _left_by(facts)
    rmf = left["psm_c0ffee11"]
    assert [c["name"] for c in rmf["containers"]] == ["vllm-rmf"]
    assert rmf["ambiguous"] is True and rmf["others_possible"] is True
    assert (
        rmf["why"]
        == "possibly vllm-rmf (docker b2b2b2b2b2b2) (IPC mode unknown), born while it ran"
    )
    assert _scoped(facts, "vllm-rmf") == set()
    every = {a.path.rsplit("/", 1)[-1] for a in plan_clean(facts, OPTS)}
    assert {"psm_c0ffee11", "psm_c0ffee22", "sem.mp-r2m4f6zz"} <= every
    # vllm-bash's record says --ipc=host: its files stay its own
    bash = left["psm_6a1f0c2e"]
    assert bash["ambiguous"] is False and bash["others_possible"] is False
    assert _scoped(facts, "vllm-bash") == {"psm_6a1f0c2e", "psm_9b7d44a1", "sem.mp-3kq9x1ab"}


def test_a_host_engine_that_ran_at_the_birth_makes_the_container_only_possible() -> None:
    """A vLLM on the host (in no container), running since before vllm-bash's files were
    born, may have left them as well: vllm-bash is no longer named as certain, and its
    scope removes none of them."""
    fake = container_story()
    fake.proc(700, "vllm serve /models/host-model", ppid=1, pgid=700, sid=700, start_s=100.0)
    on_host(fake, 700)
    facts = read_facts(fake.host(), OPTS)
    left = _left_by(facts)
    bash = left["psm_6a1f0c2e"]
    assert [c["name"] for c in bash["containers"]] == ["vllm-bash"]
    assert bash["ambiguous"] is True and bash["others_possible"] is True
    assert "engine pid(s) 700 on the host ran then too, cannot tell which" in bash["why"]
    assert _scoped(facts, "vllm-bash") == set()
    # a host engine started after the birth could not have made it
    late = container_story()
    late.proc(700, "vllm serve /models/host-model", ppid=1, pgid=700, sid=700, start_s=9000.0)
    on_host(late, 700)
    facts = read_facts(late.host(), OPTS)
    assert _left_by(facts)["psm_6a1f0c2e"]["ambiguous"] is False
    assert "psm_6a1f0c2e" in _scoped(facts, "vllm-bash")


def _site_options() -> HygieneOptions:
    """A site's own engine, as `--engine-catalog site.json` gives it: a frontend
    (`mysite-serve`) and its workers (`mysite::worker`), in no built-in catalog."""
    site = {"name": "mysite", "frontends": ["^mysite-serve"], "children": ["^mysite::worker"]}
    engines = parse_catalog_file(json.dumps({"engines": [site]}), "site.json")
    return HygieneOptions(catalog=build_catalog(engines))


def test_a_host_engine_of_the_sites_catalog_makes_the_container_only_possible() -> None:
    """The host engine of the test above, but the site's own (its catalog file): it counts
    as a built-in engine does. With the built-in catalog alone it is no engine, and
    vllm-bash stays the certain author."""
    site = _site_options()
    for cmd in ("mysite-serve --model /models/x", "mysite::worker 0"):
        fake = container_story()
        fake.proc(700, cmd, ppid=1, pgid=700, sid=700, start_s=100.0)
        on_host(fake, 700)
        facts = read_facts(fake.host(), site)
        bash = _left_by(facts, site)["psm_6a1f0c2e"]
        assert [c["name"] for c in bash["containers"]] == ["vllm-bash"], cmd
        assert bash["ambiguous"] is True and bash["others_possible"] is True, cmd
        assert "engine pid(s) 700 on the host ran then too" in bash["why"], cmd
        assert _scoped(facts, "vllm-bash", site) == set(), cmd
        plain = _left_by(read_facts(fake.host(), OPTS))["psm_6a1f0c2e"]
        assert plain["ambiguous"] is False and "engine pid" not in plain["why"], cmd


def test_a_pods_engine_of_the_sites_catalog_is_the_one_named() -> None:
    """In a pod's own /dev/shm the containers that run an engine are named, not its
    sandbox: a site's own engine is one, as vLLM is."""
    site = _site_options()
    facts = read_facts(_pod_host(engine="mysite-serve --model /models/x").host(), site)
    live = _left_by(facts, site)["psm_live0001"]
    assert _ids(live) == [LIVE] and live["ambiguous"] is False
    assert _scoped(facts, LIVE[:12], site) == {"psm_live0001"}
    plain = _left_by(read_facts(_pod_host(engine="mysite-serve --model /models/x").host(), OPTS))
    assert sorted(_ids(plain["psm_live0001"])) == sorted([SANDBOX, LIVE])


def test_without_a_runtime_a_pods_file_is_never_the_live_attempts_for_certain() -> None:
    """No runtime answers: the cgroup says the engine runs in a pod, whose earlier attempts
    were other containers, unknown now; every file there is the live one's only maybe."""
    fake = _pod_host()
    fake.http.clear()
    facts = read_facts(fake.host(), OPTS)
    for name, left in _left_by(facts).items():
        assert _ids(left) == [LIVE], name
        assert left["ambiguous"] is True and left["others_possible"] is True, name
    assert _scoped(facts, LIVE[:12]) == set()


def test_a_watch_keeps_the_ipc_mode_it_read_of_a_container_removed_since() -> None:
    """Round 1: vllm-x runs with --ipc=host (the inspect says so). Round 2: `docker rm -f`,
    only the events name it: a watch scoped to it still knows its /dev/shm was the host's,
    so what it left there is its own; a look that never saw it running cannot tell."""
    from container_story import record_shm_dir

    from accelhost.containers.docker_api import events_path
    from accelhost.containers.reader import events_window
    from accelhost.hygiene.judge.containers import ContainerScope
    from container_hosts import event

    x = cid(0x71)

    def host(running: bool) -> HostFacts:
        fake = FakeHost()
        on_host(fake, 1)
        answer = {"id": x, "name": "vllm-x", "pid": 4000, "started": rfc3339(NOW - 3000)}
        if running:
            fake.proc(4000, "vllm serve /models/tiny", ppid=1, pgid=4000, sid=4000)
            put_in_container(fake, 4000, f"/docker/{x}", nspid=(4000, 1))
            docker_answers(fake.http, [answer])
        else:
            gone = [
                event("start", x, "vllm-x", NOW - 3000),
                event("die", x, "vllm-x", NOW - 100),
                event("destroy", x, "vllm-x", NOW - 99),
            ]
            docker_answers(fake.http, [], gone, events_path(*events_window(NOW)))
        record_shm_dir(fake, "/dev/shm", [("psm_x0000001", 4096, 1, NOW - 2000, 21)], 26)
        return read_facts(fake.host(), OPTS)

    before, after = host(True), host(False)
    watching = ContainerScope("vllm-x")
    watching.resolve(Attribution(before, OPTS.catalog, ipc_modes=watching.ipc_modes))
    knowing = Attribution(after, OPTS.catalog, ipc_modes=watching.ipc_modes)
    watching.resolve(knowing)
    assert watching.chosen is not None and watching.chosen[0].ipc_mode == "host"
    _, _, shm = watching.narrow(find(after, OPTS, knowing))
    assert [v.file.path for v in shm or ()] == ["/dev/shm/psm_x0000001"]
    actions = scope_actions(plan_clean(after, OPTS), knowing, watching.chosen)
    assert [a.path for a in actions if isinstance(a, RemoveShmFile)] == ["/dev/shm/psm_x0000001"]
    fresh = ContainerScope("vllm-x")
    unknowing = Attribution(after, OPTS.catalog)
    fresh.resolve(unknowing)
    assert fresh.narrow(find(after, OPTS, unknowing))[2] == []
    assert _scoped(after, "vllm-x") == set()
