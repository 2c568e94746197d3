"""The story's host, recorded: an A2 node after `docker rm -f` of a vLLM container.

The engine's EngineCore outlived its container shell and still holds 26 GB on NPU 0; an
earlier crashed run left HugePages-backed segments behind; the pool is exhausted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hygiene_fakes import NOW, FakeHost, npu_smi

GiB = 2**30
DEVICE_FDS = {
    3: "/dev/davinci_manager",
    4: "/dev/devmm_svm",
    5: "/dev/hisi_hdc",
}


def story_host() -> FakeHost:
    fake = FakeHost()
    fake.commands["npu-smi info"] = npu_smi(
        [27880, 40000, 3400, 3400, 3400, 3400, 3400, 3400],
        65536,
        [(0, 2290107, "VLLM::EngineCore", 26000), (1, 3100000, "python3", 36000)],
    )
    # container shell 2290001 (bash -lc "vllm serve ...") is gone; its EngineCore is not
    fake.proc(
        2290107,
        "VLLM::EngineCore",
        ppid=1,
        pgid=2290001,
        comm="VLLM::EngineCor",
        start_s=2000,
        fds={**DEVICE_FDS, 9: "/dev/davinci0"},
        environ={"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:256"},
    )
    # a healthy engine on NPU 1, in a live container
    fake.proc(3099999, "containerd-shim-runc-v2 -namespace moby", ppid=1, pgid=3099999)
    fake.proc(
        3100000,
        "python3 -m vllm.entrypoints.openai.api_server --model /models/XiYanSQL-14B",
        ppid=3099999,
        pgid=3100000,
        start_s=6000,
        fds={**DEVICE_FDS, 9: "/dev/davinci1"},
        environ={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"},
    )
    # an earlier crashed run (creator 2289950, gone) left 2 GiB HugePages segments
    for n in range(4):
        fake.segment(
            32768 + n,
            2 * GiB,
            cpid=2289950,
            lpid=2289950,
            perms="4600",
            ctime=NOW - 7200,
            key=0x5A000000 + n,
        )
    # the orphan's own segment, still attached by it
    fake.segment(
        32800,
        512 * 2**20,
        cpid=2290107,
        lpid=2290107,
        nattch=1,
        perms="4600",
        ctime=NOW - 8000,
        key=0x5A000100,
    )
    fake.hugepages(2048, 4608, 0).hugepages(2048, 4608, 0, node=0)
    fake.files["/sys/kernel/mm/transparent_hugepage/enabled"] = "always [madvise] never\n"
    fake.files["/sys/kernel/mm/transparent_hugepage/defrag"] = "always defer [madvise] never\n"
    return fake


def write_story(path: Path) -> Path:
    path.write_text(json.dumps(story_host().snapshot()))
    return path


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_doctor_on_the_story_host(tmp_path: Path) -> None:
    snap = str(write_story(tmp_path / "story.json"))
    res = cli("doctor", "--snapshot", snap, "--json", "--expect-util", "0.85", "--device", "0")
    assert res.returncode == 1, res.stderr
    checks = {c["name"]: c for c in json.loads(res.stdout)["checks"]}
    assert {n: c["status"] for n, c in checks.items()} == {
        "orphan_engines": "FAIL",
        "device_holders": "OK",
        "unattributed_memory": "OK",
        "shared_memory": "WARN",
        "posix_shm": "SKIP",  # the recording predates /dev/shm listings
        "hugepages": "FAIL",
        "preflight": "FAIL",
        "host_tuning": "WARN",
        "container_init": "SKIP",  # the story's host as recorded: no container left
    }
    (orphan,) = checks["orphan_engines"]["evidence"]
    assert orphan["pid"] == 2290107 and orphan["device_memory_bytes"] == 26000 * 2**20
    assert "/dev/davinci0" in orphan["devices"] and orphan["age_s"] == 8000.0
    assert [e["shmid"] for e in checks["shared_memory"]["evidence"]] == [32768, 32769, 32770, 32771]
    assert all(e["hugetlb"] for e in checks["shared_memory"]["evidence"])
    (dev,) = checks["preflight"]["evidence"]
    assert dev["message"].startswith(
        "Free memory on device (36.77/64.0 GiB) on startup is less than desired GPU memory "
        "utilization (0.85, 54.4 GiB)."
    )
    assert [h["pid"] for h in dev["holders"]] == [2290107]
    assert [e["pid"] for e in checks["host_tuning"]["evidence"]] == [2290107]


def test_clean_plan_on_the_story_host(tmp_path: Path) -> None:
    snap = str(write_story(tmp_path / "story.json"))
    res = cli("clean", "--snapshot", snap, "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["dry_run"] is True
    kinds = [(a["kind"], a.get("pgid"), a.get("shmid")) for a in plan["actions"]]
    assert kinds == [
        ("stop", 2290001, None),
        ("remove_segment", None, 32768),
        ("remove_segment", None, 32769),
        ("remove_segment", None, 32770),
        ("remove_segment", None, 32771),
        ("remove_segment", None, 32800),
    ]
    assert plan["actions"][-1]["after_stop"] is True
    assert plan["before"]["hugepages_free"] == {"2048kB": {"free": 0, "total": 4608}}


def test_clean_on_a_recording_without_proc_says_unknown_not_zero() -> None:
    """The bundled A2 host recorded no /proc, segment table or HugePages: its before
    figures are unknown, never "0 segments, 0 orphans"."""
    res = cli("clean", "--snapshot", "example:a2-192cpu-8npu-sees-npu0", "--json")
    assert res.returncode == 0, res.stderr
    before = json.loads(res.stdout)["before"]
    assert before["segments"] is None and before["leaked_segments"] is None
    assert before["orphans"] is None and before["hugepages_free"] is None
    assert before["leaked_shm_files"] is None and before["leaked_shm_bytes"] is None
    assert before["device_memory_free_bytes"]["npu0"] == (65536 - 60030) * 2**20
    table = cli("clean", "--snapshot", "example:a2-192cpu-8npu-sees-npu0")
    assert "segments unknown; leaked /dev/shm files unknown; orphans unknown" in table.stdout
    assert "HugePages free unknown" in table.stdout


def test_negative_idle_baseline_is_one_line() -> None:
    res = cli("doctor", "--idle-baseline-mib", "-1")
    assert res.returncode == 2  # a usage error: never "a problem on the node" (1)
    assert res.stderr == "accelhost doctor: --idle-baseline-mib must not be negative\n"
