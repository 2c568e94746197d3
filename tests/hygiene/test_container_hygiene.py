"""The doctor and the cleaner on recorded hosts with containers: every finding named by its
container, the containers' own /dev/shm judged, `container_init`, `--container`, and what
happens when the runtime's socket does not answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from container_story import BASH, POD, POD_SHM, RMF, SAFE, TINI, container_story, story_snapshot
from hygiene_fakes import NOW, FakeHost

from accelhost.containers.model import Container
from accelhost.errors import UsageError
from accelhost.host.snapshot import SnapshotHost
from accelhost.hygiene import HygieneOptions, read_facts, run_checks
from accelhost.hygiene.clean.cleaner import RemoveShmFile, StopProcesses, plan_clean
from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.judge.attribution import Attribution, LeftBy
from accelhost.hygiene.judge.containers import scope_actions
from container_hosts import SHAPES, cid, on_host, put_in_container

OPTS = HygieneOptions()


def resolve_container(facts: HostFacts, wanted: str) -> list[Container]:
    return Attribution(facts, OPTS.catalog).resolve(wanted)


def scope(actions: list[Any], facts: HostFacts, chosen: list[Container]) -> list[Any]:
    return scope_actions(actions, Attribution(facts, OPTS.catalog), chosen)


def _report(data: dict[str, Any], opts: HygieneOptions = OPTS):  # type: ignore[no-untyped-def]
    facts = read_facts(SnapshotHost(data), opts)
    return facts, run_checks(facts, opts)


def _left_by_names(e: dict[str, Any]) -> list[str | None]:
    return [c["name"] for c in (e.get("left_by") or {}).get("containers", [])]


def test_container_init_warns_for_the_risky_containers_only() -> None:
    _facts, report = _report(story_snapshot())
    check = report.get("container_init")
    assert check is not None and check.status == "WARN"
    by_name = {e["container"]["name"]: e for e in check.evidence}
    assert set(by_name) == {"vllm-safe", "vllm-tini", "vllm-pod"}  # pause runs no engine
    assert not by_name["vllm-safe"]["risky"] and by_name["vllm-safe"]["pid1_kind"] == (
        "accelhost run"
    )
    tini = by_name["vllm-tini"]
    assert tini["risky"] and tini["pid1_kind"] == "init" and tini["ipc_mode"] == "host"
    assert "7 of 10 stops" in tini["cost"]
    pod = by_name["vllm-pod"]
    assert pod["risky"] and pod["pid1_kind"] == "engine" and "410 MB" in pod["cost"]
    assert "vllm-tini" in check.summary and "vllm-safe" not in check.summary
    assert 'ENTRYPOINT ["accelhost", "run", "--"]' in check.fix


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("bash -lc vllm serve /m", "shell"),
        ("/bin/sh -c python3 -m vllm.entrypoints.openai.api_server", "shell"),
        ("tini -- vllm serve /m", "init"),
        ("dumb-init vllm serve /m", "init"),
        ("vllm serve /m", "engine"),
        ("python3 -m accelhost run -- vllm serve /m", "accelhost run"),
        ("/usr/local/bin/accelhost run --grace 5 -- vllm serve /m", "accelhost run"),
        ("supervisord -n", "other"),
    ],
)
def test_pid1_kinds(command: str, kind: str) -> None:
    from accelhost.hygiene.doctor.container_init import pid1_kind

    assert pid1_kind(command, OPTS) == kind


def test_a_bash_pid1_container_with_host_ipc_is_warned_with_the_measured_cost() -> None:
    fake = FakeHost()
    on_host(fake, 1)
    fake.proc(1000, "bash -lc vllm serve /models/tiny", ppid=1, pgid=1000)
    fake.proc(1001, "vllm serve /models/tiny", ppid=1000, pgid=1000)
    for pid, inner in ((1000, 1), (1001, 7)):
        put_in_container(fake, pid, f"/docker/{cid(1)}", nspid=(pid, inner))
    check = run_checks(read_facts(fake.host(), OPTS), OPTS, ("container_init",)).checks[0]
    assert check.status == "WARN"
    (e,) = check.evidence
    assert e["pid1_kind"] == "shell" and e["shares_host_ipc"] is True
    assert "10.6 s" in e["cost"] and "137" in e["cost"]
    assert "name unknown: no runtime socket answered" in check.summary


def test_container_init_skips_when_no_container_runs_an_engine() -> None:
    fake = FakeHost()
    on_host(fake, 1)
    fake.proc(1000, "nginx -g daemon off;", ppid=1, pgid=1000)
    put_in_container(fake, 1000, f"/docker/{cid(1)}", nspid=(1000, 1))
    check = run_checks(read_facts(fake.host(), OPTS), OPTS, ("container_init",)).checks[0]
    assert check.status == "SKIP" and "no container runs an engine" in check.summary


def test_every_leftover_is_named_by_the_container_that_left_it() -> None:
    _facts, report = _report(story_snapshot())
    check = report.get("posix_shm")
    assert check is not None and check.status == "WARN"
    named = {e["path"].rsplit("/", 1)[-1]: _left_by_names(e) for e in check.evidence}
    assert named == {
        "psm_6a1f0c2e": ["vllm-bash"],  # docker stop: the exited record covers its birth
        "psm_9b7d44a1": ["vllm-bash"],
        "sem.mp-3kq9x1ab": ["vllm-bash"],
        "psm_c0ffee11": ["vllm-rmf"],  # docker rm -f: named from the runtime's events
        "psm_c0ffee22": ["vllm-rmf"],
        "sem.mp-r2m4f6zz": ["vllm-rmf"],
        "psm_01d0a1a1": ["vllm-pod"],  # the crashed incarnation, in the pod's own /dev/shm
        "psm_01d0a1a2": ["vllm-pod"],
        "sem.mp-01dold00": ["vllm-pod"],
    }
    paths = {e["path"] for e in check.evidence}
    # the live incarnations' files stay: held (their semaphores by inode)
    assert not {p for p in paths if "5afe" in p or "71a1" in p or "0e77" in p}
    assert f"{POD_SHM}/psm_01d0a1a1" in paths
    gone = next(e for e in check.evidence if e["path"].endswith("psm_c0ffee11"))
    assert gone["left_by"]["containers"][0]["state"] == "gone"
    # the events do not say its IPC mode: its /dev/shm may have been its own
    assert gone["left_by"]["ambiguous"] is True and gone["left_by"]["others_possible"] is True
    assert "possibly vllm-rmf (docker" in gone["left_by"]["why"]
    assert "IPC mode unknown" in gone["left_by"]["why"]
    # the pod's engine was restarted in place (RestartCount 1): the crashed run was it
    crashed = next(e for e in check.evidence if e["path"].endswith("psm_01d0a1a1"))
    assert crashed["left_by"]["ambiguous"] is False


def test_two_candidates_are_both_named_and_said_so() -> None:
    data = story_snapshot()
    listing = json.loads(data["http"]["/var/run/docker.sock /containers/json?all=1"])
    twin = dict(listing[2], Id=cid(0xC1), Names=["/vllm-twin"])
    data["http"]["/var/run/docker.sock /containers/json?all=1"] = json.dumps([*listing, twin])
    inspect = json.loads(data["http"][f"/var/run/docker.sock /containers/{BASH}/json"])
    inspect.update(Id=cid(0xC1), Name="/vllm-twin")
    data["http"][f"/var/run/docker.sock /containers/{cid(0xC1)}/json"] = json.dumps(inspect)
    _facts, report = _report(data)
    check = report.get("posix_shm")
    assert check is not None
    e = next(e for e in check.evidence if e["path"].endswith("psm_6a1f0c2e"))
    assert sorted(_left_by_names(e)) == ["vllm-bash", "vllm-twin"]
    assert e["left_by"]["ambiguous"] is True and "cannot tell which" in e["left_by"]["why"]


def test_processes_carry_their_container_in_json_and_text() -> None:
    fake = container_story()
    fake.proc(2003, "VLLM::Worker_TP0", ppid=1, pgid=2003, sid=2003, state="D",
              fds={3: "/dev/davinci0"})  # fmt: skip
    put_in_container(fake, 2003, SHAPES["docker-systemd"].format(c=SAFE), nspid=(2003, 11))
    fake.dirs["/proc/2003/fd"] = ["3"]
    fake.files["/proc/2003/maps"] = ""
    facts, report = _report(fake.snapshot())
    holders = report.get("device_holders")
    assert holders is not None and holders.status == "FAIL"
    (e,) = holders.evidence
    assert e["container"]["name"] == "vllm-safe" and e["container"]["id"] == SAFE
    assert "in D state (stuck in the driver)" in holders.summary and "vllm-safe" in holders.summary
    assert "wait for it, or reset that device" in holders.fix
    orphans = report.get("orphan_engines")
    assert orphans is not None and orphans.status == "FAIL"
    assert "vllm-safe" in orphans.fix and "D state" in orphans.fix
    from accelhost.hygiene.render import evidence_lines

    assert "in container vllm-safe (docker" in evidence_lines(orphans)[0]
    assert "in container vllm-safe (docker" in evidence_lines(holders)[0]
    # clean --container: the stuck orphan is vllm-safe's, nothing of vllm-tini's
    stops = [a for a in plan_clean(facts, OPTS) if isinstance(a, StopProcesses)]
    assert [t.pid for a in stops for t in a.targets] == [2003]
    assert scope(stops, facts, resolve_container(facts, "vllm-safe")) == stops
    assert scope(stops, facts, resolve_container(facts, "vllm-tini")) == []
    # a host process says null
    fake2 = FakeHost()
    fake2.proc(50, "VLLM::EngineCore", ppid=1, pgid=50, sid=50)
    orphan = run_checks(read_facts(fake2.host(), OPTS), OPTS).get("orphan_engines")
    assert orphan is not None and orphan.evidence[0]["container"] is None


def test_without_a_runtime_ids_are_said_once_and_checks_still_run() -> None:
    _facts, report = _report(story_snapshot(answering=False))
    init = report.get("container_init")
    assert init is not None and init.status == "WARN"
    assert init.summary.count("no runtime socket answered") == 1
    assert all(e["container"]["name"] is None for e in init.evidence)
    shm = report.get("posix_shm")
    assert shm is not None and shm.status == "WARN"
    # no record, no events: the host's leftovers are named by nothing (never guessed) ...
    assert not any(_left_by_names(e) for e in shm.evidence if e["path"].startswith("/dev/"))
    # ... and the pod's by the id its /dev/shm belongs to
    pod = [e for e in shm.evidence if e["path"].startswith(POD_SHM)]
    assert pod and all(e["left_by"]["containers"][0]["id"] == POD for e in pod)


def test_garbage_from_the_socket_is_like_no_answer() -> None:
    data = story_snapshot()
    data["http"] = {k: "\x00garbage{" for k in data["http"]}
    _facts, report = _report(data)
    init = report.get("container_init")
    assert init is not None and "no runtime socket answered" in init.summary


def test_doctor_container_scope_and_unknown_names() -> None:
    facts, report = _report(story_snapshot())
    chosen = resolve_container(facts, "vllm-bash")
    assert [c.id for c in chosen] == [BASH]
    scoped = run_checks(facts, OPTS, chosen=chosen)
    shm = scoped.get("posix_shm")
    assert shm is not None and shm.status == "WARN" and "3 of 9" in shm.summary
    assert {e["path"] for e in shm.evidence} == {
        "/dev/shm/psm_6a1f0c2e",
        "/dev/shm/psm_9b7d44a1",
        "/dev/shm/sem.mp-3kq9x1ab",
    }
    init = scoped.get("container_init")
    assert init is not None and init.status == "OK" and "elsewhere" in init.summary
    assert [c.id for c in resolve_container(facts, TINI[:12])] == [TINI]
    with pytest.raises(UsageError, match="no such container; known: pause .*vllm-tini"):
        resolve_container(facts, "nope")


def test_a_container_name_or_prefix_that_names_several_is_refused() -> None:
    """`--container` must name exactly what it removes: one container, or one pod's
    containers (its attempts). An id prefix two ids share, a name a removed container and
    a new one share, or one container name in two pods is exit 2, naming them all."""
    from dataclasses import replace

    from accelhost.containers.model import Pod

    facts, _ = _report(story_snapshot())
    cf = facts.containers
    assert cf is not None

    def with_containers(*extra: Any) -> Any:
        containers = {**cf.view.containers, **{c.id: c for c in extra}}
        return replace(facts, containers=replace(cf, view=replace(cf.view, containers=containers)))

    bash = cf.view.containers[BASH]
    twin = replace(bash, id=BASH[:6] + "0" * 58, state="running")  # same name, same prefix
    two = with_containers(twin)
    for wanted in (BASH[:6], "vllm-bash"):
        with pytest.raises(UsageError, match=r"names 2 containers: .*vllm-bash.*; name one by"):
            resolve_container(two, wanted)
    assert [c.id for c in resolve_container(two, BASH[:20])] == [BASH]
    pod = Pod("team-a", "vllm-0", "8d3c6a2e-1b4f-4e5a-9c7d-0a1b2c3d4e5f")
    attempts = [replace(bash, id=f"{n:x}" * 64, name="engine", pod=pod) for n in (0xC, 0xD)]
    assert len(resolve_container(with_containers(*attempts), "team-a/vllm-0")) == 2
    other = replace(attempts[1], pod=replace(pod, namespace="team-b", uid="0" * 32))
    with pytest.raises(UsageError, match="names 2 containers"):
        resolve_container(with_containers(attempts[0], other), "engine")


def test_a_scope_removes_only_what_is_that_containers_alone() -> None:
    """`clean --container X` acts on a leftover only where X alone left it, and stops a
    group only where every process of it runs in X: a file two containers may have left
    (shown under both) and a host tree with one process in X stay, for a plain `clean`."""
    from dataclasses import replace

    from accelhost.hygiene.clean.actions import ProcessRef

    facts, _ = _report(story_snapshot())
    cf = facts.containers
    assert cf is not None
    rmf, bash = cf.view.containers[RMF], cf.view.containers[BASH]
    one, both = LeftBy((rmf,), False, False, ""), LeftBy((rmf, bash), True, False, "")
    assert one.only({RMF}) and both.only({RMF, BASH})
    assert not both.only({RMF}) and not both.only({BASH})
    assert both.names({RMF}) and not replace(one, others_possible=True).only({RMF})
    inside = cf.view.pids_of(TINI)
    assert inside
    host = next(p for p in sorted(facts.processes or {}) if cf.view.of_pid(p) is None)
    ref = ProcessRef(0, 0, "S", "")
    mixed = StopProcesses(1, False, (replace(ref, pid=inside[0]), replace(ref, pid=host)), "")
    alone = StopProcesses(1, False, (replace(ref, pid=inside[0]),), "")
    chosen = resolve_container(facts, "vllm-tini")
    assert scope([mixed, alone], facts, chosen) == [alone]


def test_a_containers_own_emptydir_at_dev_shm_is_judged_too() -> None:
    """A pod's engine with an emptyDir (medium: Memory) at /dev/shm, as docs/containers.md
    shows: another tmpfs than the sandbox's /dev/shm of the same IPC namespace. Its leaked
    file is found there, and the sandbox's listed as before."""
    from container_story import record_shm_dir

    from accelhost.host.base import FileStat

    fake = FakeHost()
    on_host(fake, 1)
    uid = "11111111-2222-3333-4444-555555555555"
    shape = SHAPES["containerd-k8s-systemd"]
    for pid, c, cmd in ((5000, cid(0x51), "/pause"), (5100, cid(0x53), "vllm serve /m")):
        fake.proc(pid, cmd, ppid=1, pgid=pid, start_s=50 + pid / 100)
        put_in_container(
            fake,
            pid,
            shape.format(c=c, u_=uid.replace("-", "_")),
            ipc=4026532700,
            pid_ns=4026533000 + pid,
            nspid=(pid, 1),
        )
        root = f"/proc/{pid}/root/dev/shm"
        dev = 300 if pid == 5000 else 400  # the sandbox's tmpfs, the engine's emptyDir
        fake.stats[root] = FileStat("shm", "dir", 0, 0, 0, "root", 0.0, 0.0, dev, 2)
    record_shm_dir(fake, "/dev/shm", [], 26)
    record_shm_dir(fake, "/proc/5000/root/dev/shm", [("psm_sandbox1", 4096, 1, NOW - 9000, 7)], 300)
    record_shm_dir(fake, "/proc/5100/root/dev/shm", [("psm_emptydir", 4096, 1, NOW - 9000, 8)], 400)
    facts, report = _report(fake.snapshot())
    posix = report.get("posix_shm")
    assert posix is not None
    assert {e["path"] for e in posix.evidence} == {
        "/proc/5000/root/dev/shm/psm_sandbox1",
        "/proc/5100/root/dev/shm/psm_emptydir",
    }


def test_clean_container_scope_plans_exactly_what_it_left() -> None:
    facts, _ = _report(story_snapshot())
    actions = plan_clean(facts, OPTS)
    paths = {a.path for a in actions if isinstance(a, RemoveShmFile)}
    assert len(paths) == 9 and not any("5afe" in p or "0e77" in p for p in paths)
    for name, expected in (
        ("vllm-bash", {"psm_6a1f0c2e", "psm_9b7d44a1", "sem.mp-3kq9x1ab"}),
        ("vllm-rmf", set()),  # IPC mode unknown: it only may have left its three
        ("vllm-pod", {"psm_01d0a1a1", "psm_01d0a1a2", "sem.mp-01dold00"}),
        ("vllm-safe", set()),
    ):
        scoped = scope(actions, facts, resolve_container(facts, name))
        assert {a.path.rsplit("/", 1)[-1] for a in scoped if isinstance(a, RemoveShmFile)} == (
            expected
        ), name
        assert not [a for a in scoped if isinstance(a, StopProcesses)]
    assert RMF not in {c.id for c in resolve_container(facts, "vllm-bash")}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost", *args], capture_output=True, text=True, timeout=120
    )


def test_cli_container_option_exit_codes_and_json(tmp_path: Path) -> None:
    snap = tmp_path / "story.json"
    snap.write_text(json.dumps(story_snapshot()))
    bad = _cli("doctor", "--snapshot", str(snap), "--container", "nothing-like-it")
    assert bad.returncode == 2 and "known: pause (docker" in bad.stderr
    bad = _cli("clean", "--snapshot", str(snap), "--container", "nothing-like-it")
    assert bad.returncode == 2 and "vllm-rmf (docker" in bad.stderr
    res = _cli("clean", "--snapshot", str(snap), "--container", "vllm-bash", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert len(plan["actions"]) == 3
    assert all(a["container"]["containers"][0]["name"] == "vllm-bash" for a in plan["actions"])
    res = _cli("doctor", "--snapshot", str(snap), "--json", "--check", "container_init")
    assert res.returncode == 0 and json.loads(res.stdout)["checks"][0]["status"] == "WARN"


def test_shm_space_preflight_in_vllms_words() -> None:
    fake = container_story()
    fake.commands["stat -f -c %S %b %a /dev/shm"] = "4096 131072 25600\n"  # 512 MiB, 100 free
    opts = HygieneOptions(expect_util=0.85)
    check = run_checks(read_facts(fake.host(), opts), opts, ("preflight",)).checks[0]
    assert check.status == "FAIL"
    (e,) = [e for e in check.evidence if e["kind"] == "shm_space"]
    assert e["message"] == (
        "Insufficient space in /dev/shm for the engine's shared memory: 400 MiB required, "
        "100 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host)."
    )
    roomy = container_story()  # 7.2 GiB free: the device preflight alone decides
    check = run_checks(read_facts(roomy.host(), opts), opts, ("preflight",)).checks[0]
    assert not [e for e in check.evidence if e.get("kind") == "shm_space"]


@pytest.mark.parametrize(
    ("conf", "dropin", "uid", "warned"),
    [
        ("[Login]\n#RemoveIPC=yes\n", None, 1000, True),  # systemd's default
        ("[Login]\nRemoveIPC=no\n", None, 1000, False),
        ("[Login]\nRemoveIPC=no\n", "[Login]\nRemoveIPC=yes\n", 1000, True),  # drop-in wins
        ("[Login]\n", None, 0, False),  # root's engine: logind leaves it alone
    ],
)
def test_logind_remove_ipc(conf: str, dropin: str | None, uid: int, warned: bool) -> None:
    fake = FakeHost()
    fake.proc(700, "/lib/systemd/systemd-logind", ppid=1, pgid=700)
    fake.proc(1000, "vllm serve /models/tiny", ppid=1, pgid=1000)
    fake.files["/proc/1000/status"] += f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
    fake.files["/etc/systemd/logind.conf"] = conf
    if dropin is not None:
        fake.dirs["/etc/systemd/logind.conf.d"] = ["50-ipc.conf"]
        fake.files["/etc/systemd/logind.conf.d/50-ipc.conf"] = dropin
    check = run_checks(read_facts(fake.host(), OPTS), OPTS, ("host_tuning",)).checks[0]
    items = [e for e in check.evidence if e.get("item") == "logind_remove_ipc"]
    assert bool(items) == warned
    if warned:
        assert check.status == "WARN" and "vLLM #54259" in items[0]["detail"]
        assert "RemoveIPC=no" in check.fix


def test_the_bundled_example_is_the_story_and_tells_it() -> None:
    from container_story import EXAMPLE_NAME, bundled_example

    import accelhost
    from accelhost.host.snapshot import load_snapshot

    path = Path(accelhost.__file__).parent / f"data/examples/{EXAMPLE_NAME}.json"
    assert json.loads(path.read_text(encoding="utf-8")) == bundled_example()
    host = load_snapshot(f"example:{EXAMPLE_NAME}")
    report = run_checks(read_facts(host, OPTS), OPTS)
    assert report.get("container_init").status == "WARN"  # type: ignore[union-attr]
    shm = report.get("posix_shm")
    assert shm is not None and len(shm.evidence) == 9
    assert {n for e in shm.evidence for n in _left_by_names(e)} == {
        "vllm-bash",
        "vllm-rmf",
        "vllm-pod",
    }


def test_watch_logs_name_the_containers_and_export_container_init() -> None:
    from prometheus_client import generate_latest

    from accelhost.host.snapshot import load_snapshot
    from accelhost.hygiene.watch.watcher import WatchConfig, Watcher

    host = load_snapshot("example:docker-vllm-leak")
    logs: list[dict[str, Any]] = []
    watcher = Watcher(lambda: host, OPTS, WatchConfig(), logs.append)
    watcher.run_once()
    by_check = {e["check"]: e for e in logs if e.get("event") == "check_status"}
    assert by_check["container_init"]["containers"] == [
        "vllm-pod (docker b6b6b6b6b6b6)",
        "vllm-safe (docker b3b3b3b3b3b3)",
        "vllm-tini (docker b4b4b4b4b4b4)",
    ]
    assert "vllm-rmf (docker b2b2b2b2b2b2)" in by_check["posix_shm"]["containers"]
    text = generate_latest(watcher.registry).decode()
    assert 'accelhost_check_status{check="container_init",state="WARN"} 1.0' in text


def test_watch_scoped_to_one_container_judges_and_counts_only_what_it_left() -> None:
    from prometheus_client import generate_latest

    from accelhost.host.snapshot import load_snapshot
    from accelhost.hygiene.watch.watcher import WatchConfig, Watcher

    host = load_snapshot("example:docker-vllm-leak")
    whole = Watcher(lambda: host, OPTS, WatchConfig(), lambda _e: None).run_once()
    opts = HygieneOptions(container="vllm-bash")
    watcher = Watcher(lambda: host, opts, WatchConfig(), lambda _e: None)
    rnd = watcher.run_once()
    shm = rnd.report.get("posix_shm")
    assert shm is not None and shm.status == "WARN"
    assert {e["path"].rsplit("/", 1)[-1] for e in shm.evidence} == {
        "psm_6a1f0c2e",
        "psm_9b7d44a1",
        "sem.mp-3kq9x1ab",
    }
    assert whole.shm_files == 9 and rnd.shm_files == 3  # the gauges count its files only
    init = rnd.report.get("container_init")
    assert init is not None and init.status == "OK"  # the risky ones are others
    text = generate_latest(watcher.registry).decode()
    assert 'accelhost_check_status{check="container_init",state="WARN"} 0.0' in text
    # a container that runs nothing risky and left nothing: nothing to say
    safe = Watcher(
        lambda: host, HygieneOptions(container="vllm-safe"), WatchConfig(), lambda _e: None
    ).run_once()
    assert safe.shm_files == 0 and safe.orphans == 0


def test_watch_container_naming_none_exits_2_at_once(tmp_path: Path) -> None:
    snap = tmp_path / "story.json"
    snap.write_text(json.dumps(story_snapshot()))
    common = ("watch", "--snapshot", str(snap), "--metrics-addr", "none", "--rounds", "2",
              "--interval", "0.1")  # fmt: skip
    bad = _cli(*common, "--container", "nothing-like-it")
    assert bad.returncode == 2 and "known: pause (docker" in bad.stderr, bad.stderr
    assert "round_failed" not in bad.stdout
    good = _cli(*common, "--container", "vllm-rmf")
    assert good.returncode == 0, good.stderr
    status = [json.loads(line) for line in good.stdout.splitlines() if "check_status" in line]
    posix = next(e for e in status if e["check"] == "posix_shm")
    assert posix["containers"] == ["vllm-rmf (docker b2b2b2b2b2b2)"]


def test_watch_names_a_leftover_by_the_container_it_saw_holding_it() -> None:
    """Round 1: a container (no runtime answers) maps /dev/shm/psm_a. Round 2: it is gone
    with no record and no event, and psm_a is left: watch names the container it saw."""
    from container_story import record_shm_dir

    from accelhost.hygiene.watch.watcher import WatchConfig, Watcher

    def host(running: bool) -> SnapshotHost:
        fake = FakeHost()
        on_host(fake, 1)
        if running:
            fake.proc(1000, "vllm serve /models/tiny", ppid=1, pgid=1000)
            put_in_container(fake, 1000, f"/docker/{cid(0xA1)}", nspid=(1000, 1))
            fake.files["/proc/1000/maps"] = (
                "7f0000000000-7f0000100000 rw-s 00000000 00:1a 301 /dev/shm/psm_a\n"
            )
        for pid in fake.pids:
            fake.files.setdefault(f"/proc/{pid}/maps", "")
            fake.dirs.setdefault(f"/proc/{pid}/fd", [])
        record_shm_dir(fake, "/dev/shm", [("psm_a", 4096, 1, NOW - 3600, 301)], 26)
        return fake.host()

    hosts = iter([host(True), host(False), host(False)])
    logs: list[dict[str, Any]] = []
    watcher = Watcher(lambda: next(hosts), OPTS, WatchConfig(), logs.append)
    first = watcher.run_once().report.get("posix_shm")
    assert first is not None and first.status == "OK"
    second = watcher.run_once().report.get("posix_shm")
    assert second is not None and second.status == "WARN"
    (e,) = second.evidence
    assert [c["id"] for c in e["left_by"]["containers"]] == [cid(0xA1)]
    assert "seen holding it" in e["left_by"]["why"]
    # a single look (the doctor) has no memory: the file is named by nothing
    facts = read_facts(host(False), OPTS)
    alone = run_checks(facts, OPTS).get("posix_shm")
    assert alone is not None and alone.evidence[0]["left_by"] is None


def test_the_recorded_docker_leak_names_each_file_with_its_container() -> None:
    """`example:docker-seed-leak`, recorded on real Docker by the real-engine suite: the
    seed's container stopped and its three files are each left by it; the `accelhost run`
    container is no risk; the device holder is named with its container."""
    from accelhost.host.snapshot import load_snapshot

    opts = HygieneOptions(shm_min_age_s=0)
    report = run_checks(read_facts(load_snapshot("example:docker-seed-leak"), opts), opts)
    shm = report.get("posix_shm")
    assert shm is not None and shm.status == "WARN"
    files = [e for e in shm.evidence if e.get("kind") == "shm_file"]
    assert len(files) == 3 and {e["path"].rsplit("/", 1)[1][:4] for e in files} == {"psm_", "sem."}
    assert {n for e in files for n in _left_by_names(e)} == {"ah-seed-bash"}
    init = report.get("container_init")
    assert init is not None and init.status == "OK", init
    holders = report.get("device_holders")
    assert holders is not None
    (held,) = [e for e in holders.evidence if e.get("kind") == "process"]
    assert held["container"]["name"] == "ah-device-holder"
