"""The host door: snapshot validation, recording and replay, live reads."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import accelhost
from accelhost.cli.main import main
from accelhost.errors import HostError, SnapshotError
from accelhost.host import LiveHost, RecordingHost, SnapshotHost, load_snapshot
from accelhost.host.snapshot import example_names


def write(tmp_path: Path, data: object, name: str = "host.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return str(path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "not valid JSON (line 1"),
        ("[]", "a snapshot is a JSON object"),
        ('{"format": "accelhost-snapshot/2"}', "unsupported format 'accelhost-snapshot/2'"),
        ('{"format": "accelhost-snapshot/1", "files": {"/a": 3}}', "'files' must map strings"),
        ('{"format": "accelhost-snapshot/1", "dirs": {"/a": "x"}}', "'dirs' must map paths"),
        ('{"format": "accelhost-snapshot/1", "commands": {"ls": 3}}', "command 'ls' must be"),
        ('{"format": "accelhost-snapshot/1", "machine": 5}', "'machine' must be a string"),
    ],
)
def test_malformed_snapshots_are_refused_naming_file_and_problem(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = write(tmp_path, content)
    with pytest.raises(SnapshotError) as err:
        load_snapshot(path)
    assert path in str(err.value) and problem in str(err.value)


def test_missing_snapshot_through_the_cli_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.json")
    # a file the user named that is not there: a usage error (2), as from every command
    for command in ("topo", "plan", "doctor"):
        assert main([command, "--snapshot", missing]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.endswith(f": snapshot {missing}: no such file\n")


def test_replay_is_exact_and_absent_means_absent() -> None:
    host = SnapshotHost(
        {
            "format": "accelhost-snapshot/1",
            "machine": "aarch64",
            "env": {"A": "1"},
            "files": {"/f": "text"},
            "dirs": {"/d": ["a", "b"]},
            "links": {"/proc/1/fd/3": "/dev/davinci0"},
            "commands": {"echo hi": "hi\n", "false": {"stdout": "", "rc": 1}},
        }
    )
    assert host.machine == "aarch64" and not host.is_live
    assert host.getenv("A") == "1" and host.getenv("HOME") is None
    assert host.read_file("/f") == "text" and host.read_file("/etc/hostname") is None
    assert host.list_dir("/d") == ["a", "b"] and host.list_dir("/") is None
    assert host.read_link("/proc/1/fd/3") == "/dev/davinci0"
    assert host.run(["echo", "hi"]) is not None and host.run(["echo", "hi"]).stdout == "hi\n"
    failed = host.run(["false"])
    assert failed is not None and failed.rc == 1 and not failed.ok
    assert host.run(["ls"]) is None  # not recorded = not installed


def test_live_host_missing_binary_is_not_installed() -> None:
    assert LiveHost().run(["accelhost-no-such-binary-xyz"]) is None


def test_live_host_runs_with_c_locale() -> None:
    host = LiveHost(env={**os.environ, "LC_ALL": "de_DE.UTF-8", "LANG": "de_DE.UTF-8"})
    res = host.run(["sh", "-c", "echo $LC_ALL $LANG $LC_MESSAGES"])
    assert res is not None and res.stdout.split() == ["C", "C", "C"]


def test_live_host_timeout_is_a_host_error() -> None:
    with pytest.raises(HostError, match="did not answer within 0.2 s"):
        LiveHost(timeout=0.2).run(["sleep", "5"])


def test_live_reads_run_concurrently(tmp_path: Path) -> None:
    # Each command waits until all four have started: run one after another, the first
    # would never see the others and would time out. No clock is read.
    script = (
        f'touch {tmp_path}/"$0"; '
        f'while [ "$(ls {tmp_path} | wc -l)" -lt 4 ]; do sleep 0.01; done; echo "$0"'
    )
    host = LiveHost(timeout=20)
    results = host.run_many([["sh", "-c", script, str(i)] for i in range(4)])
    assert [r.stdout.strip() for r in results if r] == ["0", "1", "2", "3"]


def test_record_then_replay_gives_the_same_topology(tmp_path: Path) -> None:
    recorder = RecordingHost(LiveHost())
    live_topo = accelhost.read_topology(recorder)
    path = write(tmp_path, recorder.to_snapshot())
    replayed = accelhost.read_topology(load_snapshot(path))
    assert replayed == live_topo


def test_snapshot_command_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "me.json"
    assert main(["snapshot", "-o", str(out), "--plan-only"]) == 0
    data = json.loads(out.read_text())
    assert data["format"] == "accelhost-snapshot/1"
    assert "/proc/self/status" in data["files"]
    capsys.readouterr()
    assert main(["topo", "--snapshot", str(out), "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert main(["topo", "--json"]) == 0
    live = json.loads(capsys.readouterr().out)
    assert replayed["numa_nodes"] == live["numa_nodes"] and replayed["cpus"] == live["cpus"]


def test_bundled_examples_all_load_and_plan() -> None:
    names = example_names()
    assert {"a3-640cpu-16npu", "a2-192cpu-8npu-sees-npu0", "950-384cpu-8npu-sees-0123"} <= set(
        names
    )
    for name in names:
        host = load_snapshot(f"example:{name}")
        if host.device_type in ("A2", "A3", "310P", "950"):
            assert accelhost.plan(host).devices


def test_unknown_example_lists_the_bundled_ones() -> None:
    with pytest.raises(SnapshotError, match="no such bundled example .*a3-640cpu-16npu"):
        load_snapshot("example:nope")


# Recorded on hosts without accelerators (the real-engine suite's vLLM CPU servers).
CPU_ONLY_EXAMPLES = {"vllm-cpu-orphaned-engine", "docker-vllm-leak", "docker-seed-leak"}


@pytest.mark.parametrize("name", example_names())
def test_topo_works_on_every_bundled_example(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "--snapshot", f"example:{name}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("machine ")
    assert "accelerators: " in out and ("none found" in out) == (name in CPU_ONLY_EXAMPLES)
    assert main(["topo", "--snapshot", f"example:{name}", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert bool(data["accelerators"]) != (name in CPU_ONLY_EXAMPLES) and data["numa_nodes"]


def test_topo_of_this_machine_says_plainly_there_is_no_accelerator(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["topo"]) == 0
    out = capsys.readouterr().out
    assert f"CPUs         {os.cpu_count()}" in out
    if not (shutil.which("npu-smi") or shutil.which("nvidia-smi")):
        assert "accelerators: none found" in out


@pytest.mark.parametrize(
    ("cgroup", "path"),
    [
        ("0::/kubepods/pod1\n", "/sys/fs/cgroup/kubepods/pod1/cpuset.cpus.effective"),
        ("3:cpuset:/docker/abc\n0::/\n", "/sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus"),
    ],
)
def test_topo_shows_the_cgroup_cpuset_when_it_differs(
    cgroup: str, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    data = accelhost.load_snapshot("example:random-a3-3")
    data._files["/proc/self/cgroup"] = cgroup
    data._files[path] = "0-15\n"
    data._files["/proc/self/status"] = "Cpus_allowed_list:\t0\n"  # pinned by libgomp, say
    topo = accelhost.read_topology(data)
    assert topo.cpuset == tuple(range(16)) and topo.allowed_cpus == (0,)
    from accelhost.cli.topo import render_topology

    assert "cgroup cpuset 0-15 (differs from the allowed CPUs" in render_topology(topo)
