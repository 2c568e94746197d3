"""Device helpers, on the CPU build of torch, plus a recording fake of a stream backend."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from accelhost.pipeline import Pipeline, Stage  # noqa: E402
from accelhost.pipeline.torch import (  # noqa: E402
    Backend,
    DeviceToHost,
    HostToDevice,
    PinnedBuffers,
    detect_backend,
    device_stage,
)


def test_importing_the_pipeline_does_not_import_torch() -> None:
    code = "import sys, accelhost.pipeline; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_cpu_backend_when_no_accelerator() -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    be = detect_backend()
    assert be.name == "cpu" and not be.has_streams
    with pytest.raises(RuntimeError):
        detect_backend("cuda")


def test_host_to_device_copies_survive_buffer_reuse() -> None:
    h2d = HostToDevice(detect_backend("cpu"), buffers=2)
    hosts = [torch.full((3, 5), float(i)) for i in range(6)]
    batches = [h2d(h) for h in hosts]
    for i, b in enumerate(batches):  # later copies through the same buffers changed nothing
        assert torch.equal(b.wait(), hosts[i])
        assert b.ready()
    assert h2d.buffers.allocations == 2  # six batches, two buffers, no new allocation


def test_buffers_grow_for_a_larger_batch() -> None:
    h2d = HostToDevice(detect_backend("cpu"), buffers=1)
    small = h2d(torch.ones(4))
    big = h2d(torch.arange(100, dtype=torch.int64))
    assert torch.equal(small.wait(), torch.ones(4))
    assert torch.equal(big.synchronize(), torch.arange(100))
    assert h2d.buffers.allocations == 2


def test_helpers_as_pipeline_stages() -> None:
    be = detect_backend("cpu")
    model = torch.nn.Linear(4, 2)
    torch.nn.init.constant_(model.weight, 1.0)
    torch.nn.init.zeros_(model.bias)
    pipe = Pipeline(
        Stage(lambda x: torch.full((1, 4), float(x))),
        Stage(HostToDevice(be)),
        Stage(device_stage(model, be), device=True),
        Stage(DeviceToHost(be)),
        Stage(lambda t: t.flatten().tolist()),
    )
    assert list(pipe.run(range(20))) == [[4.0 * x, 4.0 * x] for x in range(20)]


class _Log:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []


class _Event:
    def __init__(self, log: _Log) -> None:
        self.log = log

    def record(self, stream: Any) -> None:
        self.log.calls.append(("record", stream))

    def synchronize(self) -> None:
        self.log.calls.append(("event.synchronize", self))

    def query(self) -> bool:
        return True


class _Stream:
    def __init__(self, log: _Log, name: str) -> None:
        self.log, self.name = log, name

    def wait_event(self, event: Any) -> None:
        self.log.calls.append(("wait_event", self.name))

    def __repr__(self) -> str:
        return self.name


class _FakeModule:
    """torch.cuda's shape, recording calls; `synchronize` is the whole-device wait."""

    def __init__(self, log: _Log) -> None:
        self.log = log
        self.compute = _Stream(log, "compute")

    def Stream(self, device: Any = None) -> _Stream:  # noqa: N802
        return _Stream(self.log, "side")

    def Event(self) -> _Event:  # noqa: N802
        return _Event(self.log)

    def current_stream(self, device: Any = None) -> _Stream:
        return self.compute

    def stream(self, s: Any) -> Any:
        from contextlib import nullcontext

        return nullcontext()

    def synchronize(self) -> None:
        self.log.calls.append(("DEVICE SYNCHRONIZE", None))


class _FakeBackend(Backend):
    @property
    def pins_memory(self) -> bool:
        return False

    def record_stream(self, tensor: Any, stream: Any) -> None:
        self.module.log.calls.append(("record_stream", stream))  # type: ignore[union-attr]


def test_events_not_device_synchronise() -> None:
    log = _Log()
    be = _FakeBackend("fake", torch.device("cpu"), _FakeModule(log))
    h2d = HostToDevice(be, buffers=1)
    first = h2d(torch.ones(2))
    assert ("record", h2d.stream) in log.calls  # one event per batch, on the side stream
    first.wait()
    assert ("wait_event", "compute") in log.calls  # the consumer waits on the device
    assert ("record_stream", be.module.compute) in log.calls  # type: ignore[union-attr]
    log.calls.clear()
    h2d(torch.ones(2))  # reuses the only buffer: must wait for the first copy's event
    assert ("event.synchronize", first.event) in log.calls
    assert not [c for c in log.calls if c[0] == "DEVICE SYNCHRONIZE"]


def test_pinned_buffers_need_a_slot() -> None:
    with pytest.raises(ValueError):
        PinnedBuffers(detect_backend("cpu"), count=0)
