"""Where the time goes: stats(), the Chrome trace, the Prometheus export."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from accelhost.pipeline import Batch, Pipeline, PipelineError, Stage


def pre(x: int) -> int:
    return x + 1


def device(x: int) -> int:
    time.sleep(0.002)
    return x


def post(x: int) -> int:
    return -x


def _pipe(**kw: object) -> Pipeline:
    return Pipeline(
        Stage(pre, workers=2),
        Stage(device, device=True, batch=Batch(4, 1))
        if kw.pop("batched", False)
        else Stage(device, device=True),
        Stage(post),
        queue_size=8,
        **kw,  # type: ignore[arg-type]
    )


def test_stats_count_items_and_split_time() -> None:
    pipe = _pipe()
    assert list(pipe.run(range(50))) == [-(x + 1) for x in range(50)]
    s = pipe.stats()
    assert s["running"] is False
    assert s["items_in"] == s["items_out"] == 50
    assert [st["name"] for st in s["stages"]] == ["pre", "device", "post"]
    for st in s["stages"]:
        assert st["items"] == 50
        assert st["busy_s"] >= 0 and st["idle_s"] >= 0
        assert 0 <= st["busy_fraction"] <= 1
        assert st["busy_fraction"] + st["idle_fraction"] == pytest.approx(1, abs=1e-3)
        assert set(st["queue_depth"]) == {"capacity", "now", "mean", "max"}
        assert st["queue_depth"]["max"] <= 8 + 4  # capacity plus at most one batch
    dev = s["stages"][1]
    assert dev["busy_s"] >= 50 * 0.002  # it slept that long at least
    assert s["bubble"] == dev["idle_fraction"]


def every_third_fails(x: int) -> int:
    if x % 3 == 0:
        raise ValueError(x)
    return x


@pytest.mark.parametrize("workers", [1, 3])
def test_items_out_counts_results_not_skipped_items(workers: int) -> None:
    """A known defect of the last release: items dropped by on_error="skip" were
    counted in items_out, so it disagreed with what the caller received."""
    pipe = Pipeline(Stage(every_third_fails, workers=workers), Stage(post), on_error="skip")
    got = list(pipe.run(range(30)))
    assert sorted(got) == sorted(-x for x in range(30) if x % 3)
    s = pipe.stats()
    assert s["items_in"] == 30
    assert s["items_out"] == len(got) == 20
    assert s["stages"][0]["errors"] == 10


def test_items_out_counts_errors_returned_in_place() -> None:
    pipe = Pipeline(Stage(every_third_fails), on_error="return")
    got = list(pipe.run(range(9)))
    assert [type(v) for v in got].count(ValueError) == 3
    assert pipe.stats()["items_out"] == len(got) == 9


def test_items_out_counts_what_the_caller_took_before_closing() -> None:
    pipe = Pipeline(Stage(pre), queue_size=4)
    gen = pipe.run(range(100))
    taken = [next(gen) for _ in range(7)]
    gen.close()
    assert taken == [1, 2, 3, 4, 5, 6, 7]
    assert pipe.stats()["items_out"] == 7


def test_bubble_is_none_without_a_device_stage() -> None:
    pipe = Pipeline(Stage(pre))
    list(pipe.run(range(3)))
    assert pipe.stats()["bubble"] is None


def test_trace_has_a_track_per_worker_and_a_span_per_item(tmp_path: Path) -> None:
    pipe = _pipe(trace=True)
    list(pipe.run(range(30)))
    out = tmp_path / "trace.json"
    pipe.write_trace(out)
    events = json.loads(out.read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert sorted(tracks.values()) == [
        "1 pre / worker 0",
        "1 pre / worker 1",
        "2 device / worker 0",
        "3 post / worker 0",
    ]
    spans = [e for e in events if e["ph"] == "X"]
    for stage in ("pre", "device", "post"):
        seqs = sorted(e["args"]["first_item"] for e in spans if e["cat"] == stage)
        assert seqs == list(range(30))
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert any(e["ph"] == "C" for e in events)  # queue depth counters


def test_trace_of_a_batched_stage_has_one_span_per_batch(tmp_path: Path) -> None:
    pipe = _pipe(trace=True, batched=True)
    list(pipe.run(range(30)))
    pipe.write_trace(tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    dev = [e for e in events if e["ph"] == "X" and e["cat"] == "device"]
    assert sum(e["args"]["items"] for e in dev) == 30
    assert all(e["args"]["items"] <= 4 for e in dev)


def test_write_trace_without_trace_is_an_error(tmp_path: Path) -> None:
    pipe = _pipe()
    list(pipe.run(range(3)))
    with pytest.raises(PipelineError, match="trace=True"):
        pipe.write_trace(tmp_path / "t.json")


def test_prometheus_export() -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    pipe = _pipe()
    list(pipe.run(range(20)))
    registry = prometheus_client.CollectorRegistry()
    registry.register(pipe.prometheus_collector(pipeline="bench"))
    text = prometheus_client.generate_latest(registry).decode()
    assert 'accelhost_pipeline_stage_items_total{pipeline="bench",stage="device"} 20.0' in text
    assert "accelhost_pipeline_device_idle_ratio" in text
    assert "accelhost_pipeline_stage_busy_seconds_total" in text


def test_stats_while_running() -> None:
    pipe = Pipeline(Stage(pre), Stage(device, device=True), queue_size=4)
    gen = pipe.run(range(1000))
    try:
        for n, _ in enumerate(gen):
            if n == 20:
                break
        s = pipe.stats()
        assert s["running"] is True
        assert s["items_out"] == 21  # the 21st was yielded, then the loop broke
        assert s["stages"][1]["items"] >= 20
    finally:
        gen.close()
    assert pipe.stats()["running"] is False


def test_prometheus_idle_counter_never_goes_down() -> None:
    """A call in progress counts as idle until it returns; the exported counter must not
    then drop back (Prometheus would read a counter reset, and rate() a spike)."""
    import threading

    prometheus_client = pytest.importorskip("prometheus_client")
    entered, release = threading.Event(), threading.Event()

    def held(x: int) -> int:
        entered.set()
        release.wait(10)
        return x

    pipe = Pipeline(Stage(held, device=True))
    registry = prometheus_client.CollectorRegistry()
    registry.register(pipe.prometheus_collector(pipeline="p"))
    labels = {"pipeline": "p", "stage": "held"}

    def idle() -> float:
        value = registry.get_sample_value("accelhost_pipeline_stage_idle_seconds_total", labels)
        assert value is not None
        return value

    results: list[int] = []
    consumer = threading.Thread(target=lambda: results.extend(pipe.run([1])))
    consumer.start()
    try:
        assert entered.wait(10)
        time.sleep(0.2)  # the call runs: stats() counts it as idle until it returns
        during = idle()
        release.set()
        consumer.join(10)
        after = idle()
    finally:
        release.set()
        consumer.join(10)
    assert results == [1]
    assert during > 0.1
    assert after >= during
