"""What a recorded snapshot keeps, and what it must not (secrets travel in bug reports)."""

from __future__ import annotations

from pathlib import Path

from accelhost.host.redact import REDACTED, recorder, redact_cmdline
from accelhost.host.snapshot import SnapshotHost
from accelhost.readers.procs import read_process


def test_secret_option_values_are_redacted() -> None:
    raw = "\0".join(
        ["vllm", "serve", "m", "--api-key", "sk-123", "--hf-token=hf_abc", "--port", "8000", ""]
    )
    out = redact_cmdline(raw).split("\0")
    assert out == [
        "vllm",
        "serve",
        "m",
        "--api-key",
        REDACTED,
        f"--hf-token={REDACTED}",
        "--port",
        "8000",
        "",
    ]


def test_engine_titles_and_other_options_stay() -> None:
    assert redact_cmdline("VLLM::EngineCore") == "VLLM::EngineCore"
    raw = "python3\0-m\0vllm.entrypoints.openai.api_server\0--model\0Qwen\0--port=8000\0"
    assert redact_cmdline(raw) == raw


def test_recording_keeps_the_engine_title_but_not_the_key() -> None:
    inner = SnapshotHost(
        {
            "format": "accelhost-snapshot/1",
            "files": {
                "/proc/42/stat": "42 (vllm) S 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0",
                "/proc/42/cmdline": "vllm\0serve\0m\0--api-key\0sk-secret\0",
            },
        }
    )
    rec = recorder(inner)
    info = read_process(rec, 42)
    assert info is not None and info.cmdline[:3] == ("vllm", "serve", "m")
    snap = rec.to_snapshot()
    assert "sk-secret" not in str(snap)
    replayed = read_process(SnapshotHost(snap), 42)
    assert replayed is not None and replayed.cmdline[:3] == ("vllm", "serve", "m")


def test_secrets_inside_one_shell_argument_are_redacted() -> None:
    """The usual container launch puts the whole command in one argument: its secrets go,
    the engine's name and the other options stay."""
    raw = "bash\0-lc\0vllm serve Qwen --api-key sk-123 --port 8000\0"
    assert redact_cmdline(raw) == f"bash\0-lc\0vllm serve Qwen --api-key {REDACTED} --port 8000\0"
    raw = "sh\0-c\0HF_TOKEN=hf_abc python -m vllm.entrypoints.openai.api_server --hf-token='a b'\0"
    assert redact_cmdline(raw) == (
        f"sh\0-c\0HF_TOKEN={REDACTED} python -m vllm.entrypoints.openai.api_server "
        f"--hf-token={REDACTED}\0"
    )
    assert "x9" not in redact_cmdline('bash\0-c\0exec vllm serve m --api-key="x9 y"\0')


def test_secret_variables_as_their_own_argument_are_redacted() -> None:
    raw = "env\0HF_TOKEN=hf_abc\0OPENAI_API_KEY=sk-9\0VLLM_PORT=8000\0vllm\0serve\0m\0"
    assert redact_cmdline(raw).split("\0") == [
        "env",
        f"HF_TOKEN={REDACTED}",
        f"OPENAI_API_KEY={REDACTED}",
        "VLLM_PORT=8000",
        "vllm",
        "serve",
        "m",
        "",
    ]


def test_what_is_no_secret_stays_inside_a_shell_argument() -> None:
    for raw in (
        "bash\0-c\0PYTORCH_NPU_ALLOC_CONF=expandable_segments:True vllm serve m --port=8000\0",
        "bash\0-c\0vllm serve m --no-key-check --port 8000\0",  # a flag: --port is no value
        "VLLM::EngineCore",
    ):
        assert redact_cmdline(raw) == raw


def test_recording_a_shell_launch_keeps_the_engine_but_not_the_key() -> None:
    inner = SnapshotHost(
        {
            "format": "accelhost-snapshot/1",
            "files": {
                "/proc/7/stat": "7 (bash) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 0 0",
                "/proc/7/cmdline": "bash\0-lc\0HF_TOKEN=hf_s3 vllm serve m --api-key sk-s3\0",
            },
        }
    )
    rec = recorder(inner)
    assert read_process(rec, 7) is not None
    snap = rec.to_snapshot()
    assert "s3" not in str(snap)
    replayed = read_process(SnapshotHost(snap), 7)
    assert replayed is not None and "vllm serve m" in replayed.command


# ---- a recording replays what it recorded (issue 26, point 5) --------------------------


def test_a_snapshot_with_pci_replays_those_devices(tmp_path: Path) -> None:
    """`snapshot --pci ADDR` then `plan --snapshot` said "no PCI device given": the
    recording now keeps the addresses and the family they chose, and replays them."""
    import json

    from accelhost import load_snapshot, plan
    from accelhost.cli.snapshot import record_snapshot

    machine = load_snapshot("example:gpu-2socket-8gpu-smt")  # stands in for a live host
    pci = ["0000:1b:00.0", "0000:c3:00.0"]
    data = record_snapshot(machine, doctor=False, pci=pci)
    assert (data["device_type"], data["pci"]) == ("pci", pci)
    path = tmp_path / "host.json"
    path.write_text(json.dumps(data))
    replayed = plan(load_snapshot(str(path)))
    assert replayed.device_type == "pci"
    assert [d.pci for d in replayed.devices] == pci
    assert plan(load_snapshot(str(path)), pci=pci) == replayed  # as if --pci were given again


def test_a_snapshot_pci_entry_must_be_a_list_of_addresses() -> None:
    import pytest

    from accelhost.errors import SnapshotError

    with pytest.raises(SnapshotError, match="'pci' must be a list of PCI addresses"):
        SnapshotHost({"format": "accelhost-snapshot/1", "pci": "0000:1b:00.0"})


def test_replayed_refusals_say_the_recorded_host() -> None:
    import pytest

    from accelhost import PlanError, load_snapshot, plan

    for example, kwargs, words in (
        ("vllm-cpu-orphaned-engine", {}, "no accelerator found on the recorded host"),
        ("a3-640cpu-16npu", {"devices": [99]}, "NPU 99 is not on the recorded host"),
    ):
        with pytest.raises(PlanError) as refused:
            plan(load_snapshot(f"example:{example}"), **kwargs)
        assert words in refused.value.reason and "this host" not in refused.value.reason


def test_a_live_host_is_still_this_host() -> None:
    from accelhost.topology import Topology

    assert Topology(machine="x86_64", family=None, allowed_cpus=(0,)).here == "this host"
