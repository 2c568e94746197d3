"""What a recorded snapshot keeps, and what it must not (secrets travel in bug reports)."""

from __future__ import annotations

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
