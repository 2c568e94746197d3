"""The pure checks over recorded hosts: each rule, each status."""

from __future__ import annotations

from hygiene_fakes import NOW, FakeHost, as_live, npu_smi

from accelhost.host.live import LiveHost
from accelhost.host.record import RecordingHost
from accelhost.host.redact import recorder
from accelhost.host.snapshot import SnapshotHost
from accelhost.hygiene import HygieneOptions, read_facts, run_checks
from accelhost.hygiene.clean.cleaner import RemoveSegment, StopProcesses, plan_clean

OPTS = HygieneOptions()


def check(fake: FakeHost, name: str, opts: HygieneOptions = OPTS):  # type: ignore[no-untyped-def]
    report = run_checks(read_facts(fake.host(), opts), opts, (name,))
    return report.checks[0]


def test_orphan_rules() -> None:
    """The spec's table: engine children without their frontend are orphans; frontends
    never are, whatever their process group says."""
    fake = FakeHost()  # PID 1 is systemd, session 1
    # `nohup python -m vllm.entrypoints... &` from a script that exited (leader 100 gone)
    fake.proc(101, "python3 -m vllm.entrypoints.openai.api_server", ppid=1, pgid=100, sid=100)
    fake.proc(102, "VLLM::EngineCore", ppid=101, pgid=100, sid=100, comm="VLLM::EngineCor")
    fake.proc(103, "VLLM::Worker_TP0", ppid=102, pgid=100, sid=100, comm="VLLM::Worker_TP")
    # API server killed: EngineCore re-parented to PID 1, its worker still under it
    fake.proc(201, "VLLM::EngineCore", ppid=1, pgid=200, sid=200)
    fake.proc(202, "VLLM::Worker_TP0", ppid=201, pgid=200, sid=200)
    # re-parented to a subreaper
    fake.proc(300, "/usr/bin/containerd-shim-runc-v2 -namespace k8s.io", ppid=1, pgid=300)
    fake.proc(301, "VLLM::EngineCore", ppid=300, pgid=301, sid=301)
    # hanging under the shell that launched the server (vLLM #55510)
    fake.proc(400, "bash run.sh", ppid=1, pgid=400, sid=400)
    fake.proc(401, "VLLM::EngineCore", ppid=400, pgid=400, sid=400)
    # an engine embedded in a script (`LLM(...)`): its launcher lives, healthy
    fake.proc(500, "python bench.py", ppid=1, pgid=500, sid=500, start_s=100)
    fake.proc(501, "VLLM::EngineCore", ppid=500, pgid=500, sid=500, start_s=101)
    # adopted by an unrelated process of another session
    fake.proc(600, "python supervisor.py", ppid=1, pgid=600, sid=600)
    fake.proc(601, "VLLM::EngineCore", ppid=600, pgid=650, sid=650)
    # SGLang: the frontend's group leader is gone (healthy), a lone detokenizer is not
    fake.proc(700, "python3 -m sglang.launch_server --model m", ppid=1, pgid=699, sid=699)
    fake.proc(701, "sglang::scheduler_TP0", ppid=700, pgid=699, sid=699)
    fake.proc(702, "sglang::detokenizer", ppid=1, pgid=702, sid=702)
    # the frontend is a zombie
    fake.proc(800, "vllm serve m", ppid=1, pgid=800, sid=800, state="Z")
    fake.proc(801, "VLLM::EngineCore", ppid=800, pgid=800, sid=800)
    # not an engine, leader gone: not our business
    fake.proc(901, "sleep 100", ppid=1, pgid=900)
    result = check(fake, "orphan_engines")
    assert result.status == "FAIL"
    by = {e["pid"]: e for e in result.evidence}
    assert sorted(by) == [201, 202, 301, 401, 601, 702, 801]
    assert "re-parented to PID 1 (systemd)" in by[201]["reason"]
    assert by[201]["parent"] == {"pid": 1, "cmdline": "systemd"}
    assert by[201]["engine"] == "vLLM" and by[702]["engine"] == "SGLang"
    assert "under vLLM process 201" in by[202]["reason"]
    assert by[202]["parent"]["pid"] == 201
    assert "subreaper" in by[301]["reason"] and "shell" in by[401]["reason"]
    assert "another session" in by[601]["reason"]
    assert "zombie" in by[801]["reason"]
    assert all(isinstance(e["pid"], int) for e in result.evidence)
    assert all(e["group_frontend_pid"] is None for e in result.evidence)


def test_orphan_plan_groups_and_descendants() -> None:
    fake = FakeHost()
    # an API server killed: its EngineCore, worker and a helper in a group of its own
    fake.proc(201, "VLLM::EngineCore", ppid=1, pgid=200, sid=200)
    fake.proc(202, "VLLM::Worker_TP0", ppid=201, pgid=200, sid=200)
    fake.proc(203, "helper", ppid=202, pgid=203, sid=200)
    # a script started two servers into one group; one lost its API server
    fake.proc(101, "vllm serve a", ppid=1, pgid=100, sid=100)
    fake.proc(102, "VLLM::EngineCore", ppid=101, pgid=100, sid=100)
    fake.proc(111, "VLLM::EngineCore", ppid=1, pgid=100, sid=100)
    facts = read_facts(fake.host(), OPTS)
    actions = plan_clean(facts, OPTS)
    stops = [a for a in actions if isinstance(a, StopProcesses)]
    assert [(a.pgid, a.signal_group, [t.pid for t in a.targets]) for a in stops] == [
        (100, False, [111]),  # the healthy neighbour shares the group: never signal it
        (200, True, [201, 202, 203]),
    ]
    orphans = {e["pid"]: e for e in check(fake, "orphan_engines").evidence}
    assert orphans[111]["group_frontend_pid"] == 101  # watch --auto-clean leaves it
    assert orphans[201]["group_frontend_pid"] is None


def test_engine_catalog_extends_from_options() -> None:
    from accelhost.hygiene.engines import Engine, build_catalog

    fake = FakeHost()
    fake.proc(10, "mytrt-server --port 1", ppid=1, pgid=10, sid=10)
    fake.proc(11, "trt_worker rank=0", ppid=10, pgid=10, sid=10)
    fake.proc(21, "trt_worker rank=1", ppid=1, pgid=20, sid=20)
    site = Engine("site-trt", frontends=(r"^mytrt-server",), children=(r"^trt_worker",))
    opts = HygieneOptions(catalog=build_catalog([site]))
    result = check(fake, "orphan_engines", opts)
    assert [(e["pid"], e["engine"]) for e in result.evidence] == [(21, "site-trt")]
    # --engine-child alone (no frontend known): the one under PID 1 is an orphan, the one
    # under a live process of its session is that process's own (like `LLM()` in a script)
    only_child = HygieneOptions(catalog=build_catalog(children=(r"^trt_worker",)))
    assert [e["pid"] for e in check(fake, "orphan_engines", only_child).evidence] == [21]
    assert check(fake, "orphan_engines").status == "OK"  # not in the built-in catalog


def test_leak_rule() -> None:
    fake = FakeHost()
    fake.proc(10, "creator", ppid=1, pgid=10)
    fake.segment(1, 2**20, cpid=555)  # leaked
    fake.segment(2, 2**20, cpid=555, nattch=1, lpid=10)  # attached
    fake.segment(3, 2**20, cpid=10)  # creator alive
    fake.segment(4, 2**20, cpid=555, perms="1600")  # marked for destruction
    fake.segment(5, 2**20, cpid=555, ctime=NOW - 5)  # too young
    fake.segment(6, 2**20, cpid=0)  # creator in another PID namespace
    fake.segment(7, 2**20, cpid=555, lpid=10)  # last user alive
    fake.segment(8, 2**21, cpid=556, perms="4600")  # hugetlb-backed leak
    result = check(fake, "shared_memory")
    assert result.status == "WARN"
    assert [e["shmid"] for e in result.evidence] == [1, 8]
    assert result.evidence[1]["hugetlb"] is True
    assert result.evidence[0]["creator_pid"] == 555 and result.evidence[0]["bytes"] == 2**20
    actions = plan_clean(read_facts(fake.host(), OPTS), OPTS)
    assert [a.shmid for a in actions if isinstance(a, RemoveSegment)] == [1, 8]
    young = HygieneOptions(shm_min_age_s=1)
    assert [e["shmid"] for e in check(fake, "shared_memory", young).evidence] == [1, 5, 8]


def test_hugepages_full_with_leaks_fails() -> None:
    fake = FakeHost().hugepages(2048, 1000, 0).hugepages(2048, 500, 0, node=0)
    fake.hugepages(1048576, 10, 5)
    assert check(fake, "hugepages").status == "WARN"
    fake.segment(1, 2**21, cpid=555, perms="4600")
    result = check(fake, "hugepages")
    assert result.status == "FAIL"
    assert [(e["size"], e["node"]) for e in result.evidence] == [("2048kB", None), ("2048kB", 0)]
    assert check(FakeHost().hugepages(2048, 100, 50), "hugepages").status == "OK"


def test_device_holders_and_memory() -> None:
    fake = FakeHost()
    fake.commands["npu-smi info"] = npu_smi(
        [30000, 3000], 65536, [(0, 101, "VLLMWorker", 2000), (1, 700, "ghost", 1000)]
    )
    fake.proc(
        101, "vllm serve a", ppid=1, pgid=101, fds={3: "/dev/davinci0", 4: "/dev/davinci_manager"}
    )
    fake.proc(201, "vllm serve b", ppid=1, pgid=201, fds={3: "/dev/davinci0"})
    fake.proc(301, "npu-exporter", ppid=1, pgid=301, fds={5: "/dev/davinci_manager"})
    holders = check(fake, "device_holders")
    assert holders.status == "WARN" and "/dev/davinci0: 2 engines" in holders.summary
    assert sorted(e["pid"] for e in holders.evidence) == [101, 201, 301, 700]
    unatt = check(fake, "unattributed_memory")
    assert unatt.status == "WARN"
    (dev,) = unatt.evidence
    assert (dev["device"], dev["unattributed_bytes"]) == ("npu0", 28000 * 2**20)
    # a D-state holder is a FAIL: it cannot be killed
    fake.proc(401, "python train.py", ppid=1, pgid=401, state="D", fds={3: "/dev/davinci1"})
    assert check(fake, "device_holders").status == "FAIL"


def test_nvidia_memory_and_failed_query() -> None:
    fake = FakeHost()
    fake.commands[
        "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits"
    ] = "0, 40000, 81559\n1, 500, 81559\n"
    fake.commands[
        "nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv,noheader,nounits"
    ] = "4242, 38000, 00000000:3B:00.0\n"
    fake.commands["nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader"] = (
        "0, 00000000:3B:00.0, GPU-a\n1, 00000000:5E:00.0, GPU-b\n"
    )
    fake.proc(4242, "python3 -m sglang.launch_server", ppid=1, pgid=4242, fds={3: "/dev/nvidia0"})
    opts = HygieneOptions(expect_util=0.9, device=0)
    report = run_checks(read_facts(fake.host(), opts), opts)
    by = {c.name: c for c in report.checks}
    assert by["unattributed_memory"].status == "WARN"  # 2000 MiB over the 1024 baseline
    assert by["preflight"].status == "FAIL"
    assert by["preflight"].evidence[0]["holders"][0]["pid"] == 4242
    fake.commands[
        "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits"
    ] = {"stdout": "", "rc": 9}
    report = run_checks(read_facts(fake.host(), opts), opts)
    by = {c.name: c for c in report.checks}
    assert by["unattributed_memory"].status == "UNKNOWN"
    assert by["preflight"].status == "UNKNOWN"
    assert report.exit_code == 2


def test_host_tuning_items() -> None:
    fake = FakeHost()
    fake.env["OMP_PROC_BIND"] = "true"
    fake.files["/sys/kernel/mm/transparent_hugepage/enabled"] = "[always] madvise never\n"
    fake.files["/sys/kernel/mm/transparent_hugepage/defrag"] = "[always] defer madvise never\n"
    fake.proc(
        101,
        "vllm serve m",
        ppid=100,
        pgid=100,
        fds={3: "/dev/davinci0"},
        environ={"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:128", "HF_TOKEN": "secret"},
    )
    fake.proc(100, "bash", ppid=1, pgid=100)
    fake.proc(
        201,
        "vllm serve n",
        ppid=200,
        pgid=200,
        fds={3: "/dev/davinci1"},
        environ={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"},
    )
    fake.proc(200, "bash", ppid=1, pgid=200)
    # an engine-named tool that holds no device gets no allocator hint
    fake.proc(301, "pip download vllm", ppid=300, pgid=300, environ={})
    fake.proc(300, "bash", ppid=1, pgid=300)
    result = check(fake, "host_tuning")
    assert result.status == "WARN"
    items = [e["item"] for e in result.evidence]
    assert items == ["transparent_hugepage", "OMP_PROC_BIND", "alloc_conf"]
    assert result.evidence[-1]["pid"] == 101


def test_recording_replays_to_the_same_report() -> None:
    rec = RecordingHost(LiveHost())
    facts = read_facts(rec, OPTS)
    replay = SnapshotHost(rec.to_snapshot())
    again = read_facts(replay, OPTS)
    live = run_checks(facts, OPTS).to_dict()
    assert as_live(run_checks(again, OPTS).to_dict()) == live
    assert again.processes is not None and facts.processes is not None
    assert set(again.processes) == set(facts.processes)


def test_recording_keeps_only_allocator_variables() -> None:
    fake = FakeHost()
    fake.proc(
        101,
        "vllm serve m",
        ppid=1,
        pgid=101,
        fds={3: "/dev/davinci0"},
        environ={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "HF_TOKEN": "secret"},
    )
    rec = recorder(fake.host())
    facts = read_facts(rec, OPTS)
    assert facts.engine_env[101] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    snap = rec.to_snapshot()
    assert "secret" not in str(snap)
    assert snap["files"]["/proc/101/environ"] == "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True\0"
    replayed = read_facts(SnapshotHost(snap), OPTS)
    assert replayed.engine_env == facts.engine_env


def test_a_hanging_device_tool_is_unknown_not_a_crash() -> None:
    from collections.abc import Sequence

    from accelhost.errors import HostError
    from accelhost.host.base import CommandResult

    class Wedged(SnapshotHost):
        def run(self, argv: Sequence[str]) -> CommandResult | None:
            if argv[0] == "npu-smi":
                raise HostError("`npu-smi info` did not answer within 60 s")
            return super().run(argv)

    fake = FakeHost()
    fake.commands["npu-smi info"] = npu_smi([3400], 65536, [])
    opts = HygieneOptions(expect_util=0.5)
    report = run_checks(read_facts(Wedged(fake.snapshot()), opts), opts)
    by = {c.name: c for c in report.checks}
    assert by["unattributed_memory"].status == "UNKNOWN"
    assert "did not answer" in by["unattributed_memory"].summary
    assert by["preflight"].status == "UNKNOWN"
    assert by["orphan_engines"].status == "OK"  # the other checks still ran
    assert report.exit_code == 2


def _container(pid1: str, comm: str | None = None) -> FakeHost:
    """A container's view: PID 1 is `pid1`, its EngineCore and worker hang below it."""
    fake = FakeHost()
    fake.proc(1, pid1, ppid=0, pgid=1, sid=1, comm=comm)
    fake.proc(7, "VLLM::EngineCore", ppid=1, pgid=1, sid=1, comm="VLLM::EngineCor")
    fake.proc(8, "VLLM::Worker_TP0", ppid=7, pgid=1, sid=1, comm="VLLM::Worker_TP")
    return fake


def test_engine_core_under_its_own_api_server_as_pid1_is_not_an_orphan() -> None:
    """`docker run vllm/vllm-openai`: the API server is PID 1 and EngineCore's parent from
    birth. Calling it an orphan would have `clean --yes` kill a healthy engine."""
    for pid1, comm in (
        ("python3 -m vllm.entrypoints.openai.api_server --model m", "python3"),
        ("/usr/local/bin/vllm serve m", "vllm"),
    ):
        fake = _container(pid1, comm)
        assert check(fake, "orphan_engines").status == "OK", pid1
        assert plan_clean(read_facts(fake.host(), OPTS), OPTS) == [], pid1
    # a second server started with `docker exec` (its own session 50) died: its EngineCore,
    # re-parented to the first server, is an orphan all the same
    fake = _container("vllm serve m", "vllm")
    fake.proc(51, "VLLM::EngineCore", ppid=1, pgid=51, sid=50, comm="VLLM::EngineCor")
    assert [e["pid"] for e in check(fake, "orphan_engines").evidence] == [51]


def test_engine_core_under_a_shell_or_init_as_pid1_is_an_orphan() -> None:
    """The story's container: PID 1 is `bash -lc "vllm serve ..."` (or an init); the API
    server died and its EngineCore was re-parented to PID 1, which names vllm but is not it."""
    for pid1, comm in (
        ("bash -lc vllm serve m; sleep inf", "bash"),
        ("/usr/bin/tini -- vllm serve m", "tini"),
        ("python3 -m accelhost run -- vllm serve m", "python3"),
    ):
        fake = _container(pid1, comm)
        result = check(fake, "orphan_engines")
        assert result.status == "FAIL", pid1
        # EngineCore and the worker under it: both lost their API server
        assert [e["pid"] for e in result.evidence] == [7, 8], pid1
        assert "re-parented to PID 1" in result.evidence[0]["reason"]
        assert result.evidence[1]["parent"]["pid"] == 7


def _gpu(apps: object, bus: object) -> FakeHost:
    fake = FakeHost()
    fake.commands[
        "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits"
    ] = "0, 40000, 81559\n"
    fake.commands[
        "nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv,noheader,nounits"
    ] = apps
    fake.commands["nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader"] = bus
    return fake


def test_unplaceable_or_unmeasured_processes_are_not_unattributed_memory() -> None:
    """A GPU whose 38 GB belong to a listed process is not "memory held by nothing" just
    because the bus-id map failed or the driver printed [N/A] for the process: it is
    "cannot tell", never "accounted for"."""
    bus = "0, 00000000:3B:00.0, GPU-a\n"
    ok = _gpu("4242, 38000, 00000000:3B:00.0\n", bus)
    assert check(ok, "unattributed_memory").status == "WARN"  # 2000 MiB over 1024: real
    no_bus = _gpu("4242, 38000, 00000000:3B:00.0\n", {"stdout": "", "rc": 6})
    result = check(no_bus, "unattributed_memory")
    assert result.status == "UNKNOWN" and "bus-id" in result.summary
    na = _gpu("4242, [N/A], 00000000:3B:00.0\n", bus)
    # nor "accounted for": what the process holds is not known (the sweep: it was OK)
    result = check(na, "unattributed_memory")
    assert result.status == "UNKNOWN" and "gpu0: the device tool gives no memory" in result.summary
    assert result.evidence == ()
