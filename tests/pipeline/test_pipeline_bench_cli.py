"""`accelhost bench pipeline`: options, output shapes, user errors (no timing asserted)."""

from __future__ import annotations

import json
import sys

import pytest

from accelhost.bench import pipeline as bench
from accelhost.cli.main import main


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10ms", 0.01), ("0.5s", 0.5), ("250us", 250e-6), ("3", 0.003), ("0", 0.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert bench.parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10xs", "", "ms", "-5ms", "1e3ms"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        bench.parse_duration(text)


def test_json_report_has_the_three_methods(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "pipeline", "--pre-time", "1ms", "--device-time", "2ms", "--post-time", "1ms"]
    assert main([*argv, "--items", "12", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["format"] == "accelhost-bench-pipeline/2"  # /1 had the methods at the top
    assert isinstance(doc["notes"], list)
    # the workload it ran with, so the figures can be compared with the run that made them
    assert doc["workload"] == {
        "kind": "simulated",
        "label": "pre 1 ms, device 2 ms, post 1 ms",
        "items": 12,
        "pre_s": 0.001,
        "device_s": 0.002,
        "post_s": 0.001,
        "cpu_kind": "thread",
    }
    report = doc["methods"]
    assert list(report) == ["serial", "asyncio_recipe", "accelhost"]
    for entry in report.values():
        assert entry["items"] == 12
        assert entry["items_per_s"] > 0
        assert 0 < entry["device_busy"] <= 1
        assert entry["efficiency"] is not None and entry["efficiency"] > 0
        assert entry["bound_items_per_s"] == pytest.approx(500)


def test_zero_cost_efficiency_is_null(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "bench",
        "pipeline",
        "--pre-time",
        "0",
        "--device-time",
        "0",
        "--post-time",
        "0",
        "--items",
        "50",
    ]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)["methods"]
    assert all(entry["efficiency"] is None for entry in report.values())


def test_table_and_trace(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    trace = f"{tmp_path}/bench.json"
    argv = ["bench", "pipeline", "--pre-time", "0", "--device-time", "1ms", "--post-time", "0"]
    assert main([*argv, "--items", "5", "--trace", trace]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert lines[0].startswith("workload: pre 0 ms, device 1 ms, post 0 ms; 5 items")
    assert lines[1].split()[:2] == ["method", "items"]
    assert [ln.split()[0] for ln in lines[3:6]] == ["serial", "asyncio", "accelhost"]
    assert out.err == ""  # no progress bar when stderr is not a terminal
    with open(trace) as f:
        events = json.load(f)["traceEvents"]
    assert sum(1 for e in events if e["ph"] == "X" and e["cat"] == "device") == 5


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--pre-time", "10xs"], "--pre-time"),
        (["--device-time", "fast"], "--device-time"),
        (["--post-time=-1ms"], "--post-time"),
        (["--items", "0"], "--items"),
        (["--items", "many"], "--items"),
        (["--real", "--cpu-kind", "process"], "--cpu-kind"),
    ],
)
def test_bad_options_exit_2_with_one_line(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "pipeline", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("accelhost bench: ") and needle in err[0]


@pytest.mark.parametrize("stage", ["pre", "device", "post"])
def test_stage_times_take_only_their_time_names(
    stage: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--device` takes device ids in every other command: here it is refused, never read
    as a duration (nor are --pre and --post, the names of a release before 0.1.0)."""
    ran: list[str] = []
    monkeypatch.setattr(bench, "bench", lambda *a, **k: ran.append("bench"))
    with pytest.raises(SystemExit) as exited:
        main(["bench", "pipeline", f"--{stage}", "5ms", "--items", "3"])
    assert exited.value.code == 2
    assert f"--{stage}" in capsys.readouterr().err
    assert ran == []


def test_stage_time_options_set_the_workload(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def fake_bench(wl: bench.Workload, *a: object, **k: object) -> dict[str, object]:
        seen.append(wl.label)
        return {}

    monkeypatch.setattr(bench, "bench", fake_bench)
    argv = ["--pre-time", "1ms", "--device-time", "2ms", "--post-time", "3ms", "--json"]
    assert main(["bench", "pipeline", *argv, "--items", "3"]) == 0
    assert seen == ["pre 1 ms, device 2 ms, post 3 ms"]


def test_real_without_tokenizers_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import now fails
    assert main(["bench", "pipeline", "--real", "--items", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "tokenizers" in err[0] and "pip install" in err[0]


def test_real_runs_when_installed(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("tokenizers")
    assert main(["bench", "pipeline", "--real", "--items", "6", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["methods"]["accelhost"]["items"] == 6
    assert doc["workload"]["kind"] == "real" and doc["workload"]["pre_s"] is None


def test_progress_bar_draws_on_a_terminal() -> None:
    import io

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    p = bench.Progress(4, out)
    p.start("serial")
    for _ in range(4):
        p.step()
    p.finish()
    assert "4/4" in out.getvalue() and "serial" in out.getvalue()
    quiet = io.StringIO()
    q = bench.Progress(4, quiet)
    q.start("x")
    q.step()
    q.finish()
    assert quiet.getvalue() == ""


def test_cpu_stages_in_processes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "pipeline", "--pre-time", "1ms", "--device-time", "1ms", "--post-time", "1ms"]
    assert main([*argv, "--items", "8", "--cpu-kind", "process", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["methods"]["accelhost"]["items"] == 8
    assert doc["workload"]["cpu_kind"] == "process"


@pytest.mark.parametrize("where", ["missing-dir/t.json", "", "."])
def test_unwritable_trace_path_fails_before_running(
    where: str,
    tmp_path: object,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(bench, "bench", lambda *a, **k: ran.append("bench"))
    path = f"{tmp_path}/{where}" if where else ""
    assert main(["bench", "pipeline", "--items", "3", "--trace", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("accelhost bench: --trace")
    assert ran == []  # refused up front, not after minutes of benchmark


def test_trace_is_written_after_the_timed_run(
    tmp_path: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelhost.pipeline import Pipeline

    events: list[str] = []
    real_finish = bench.Progress.finish
    real_write = Pipeline.write_trace

    def finish(self: bench.Progress) -> None:  # called once the clock has stopped
        events.append(f"stop {self.label}")
        real_finish(self)

    def write(self: Pipeline, path: str) -> None:
        events.append("write trace")
        real_write(self, path)

    monkeypatch.setattr(bench.Progress, "finish", finish)
    monkeypatch.setattr(Pipeline, "write_trace", write)
    argv = [
        "bench",
        "pipeline",
        "--pre-time",
        "0",
        "--device-time",
        "0",
        "--post-time",
        "0",
        "--items",
        "5",
    ]
    assert main([*argv, "--trace", f"{tmp_path}/t.json", "--json"]) == 0
    assert events[-2:] == ["stop accelhost", "write trace"]
    assert json.loads(capsys.readouterr().out)["methods"]["accelhost"]["items"] == 5


def test_trace_write_error_is_one_line(
    tmp_path: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelhost.pipeline import Pipeline

    def write(self: Pipeline, path: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Pipeline, "write_trace", write)
    argv = [
        "bench",
        "pipeline",
        "--pre-time",
        "0",
        "--device-time",
        "0",
        "--post-time",
        "0",
        "--items",
        "5",
    ]
    assert main([*argv, "--trace", f"{tmp_path}/t.json"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "--trace" in err[0]


def _figures(efficiency: float | None) -> dict[str, object]:
    return {"items": 4, "seconds": 1.0, "items_per_s": 4.0, "device_busy": 0.5,
            "efficiency": efficiency, "bound_items_per_s": 4.0, "vs_serial": 1.0}  # fmt: skip


def test_an_efficiency_above_one_says_why() -> None:
    """1.346 in the --real table read as beating the slowest stage, with no word why."""
    report = {"serial": _figures(0.89), "asyncio_recipe": _figures(1.26),
              "accelhost": _figures(1.346)}  # fmt: skip
    real = bench.simulated(0.001, 0.001, 0.001, 4)
    real.stage_s = None  # as --real: the bound measured in the serial run
    (note,) = bench.efficiency_notes(real, report)
    assert note.startswith("efficiency above 1 (asyncio recipe 1.260, accelhost 1.346): ")
    assert "measured in the serial run" in note and "not that the run beat" in note
    (set_note,) = bench.efficiency_notes(bench.simulated(0.001, 0.001, 0.001, 4), report)
    assert "less than their set cost" in set_note
    report["asyncio_recipe"] = report["accelhost"] = _figures(0.95)
    assert bench.efficiency_notes(real, report) == []
    report["serial"] = _figures(None)  # free stages: no bound, no figure
    assert bench.efficiency_notes(real, report) == []


def test_the_table_prints_the_note_under_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report = {"serial": _figures(0.6), "asyncio_recipe": _figures(0.9),
              "accelhost": _figures(1.02)}  # fmt: skip
    monkeypatch.setattr(bench, "bench", lambda *a, **k: report)
    assert main(["bench", "pipeline", "--items", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("note: efficiency above 1 (accelhost 1.020): ")
    assert main(["bench", "pipeline", "--items", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["notes"] == [out[-1].removeprefix("note: ")]
