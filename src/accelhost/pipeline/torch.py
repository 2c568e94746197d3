"""Device helpers for the stages around a model: copies that overlap, waits that don't stall.

They avoid the three places a device pipeline's host side loses time: pageable memory
(`HostToDevice` stages through reusable pinned buffers), copies on the compute stream (it
copies on a side stream and records one event per batch, which `DeviceBatch.wait()` makes
the consumer wait for on the device), and whole-device synchronisation (only single
events are waited on). CUDA and Ascend (`torch_npu`) when present; on a CPU-only host the
same code runs with plain memory and no streams. Import only where torch is installed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

try:
    import torch  # type: ignore[import-not-found,unused-ignore]
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "accelhost.pipeline.torch needs torch: pip install 'accelhost[torch]'"
    ) from exc

__all__ = [
    "Backend",
    "DeviceBatch",
    "DeviceToHost",
    "HostToDevice",
    "PinnedBuffers",
    "detect_backend",
    "device_stage",
    "mark",
]


@dataclass
class Backend:
    """The accelerator behind one small interface: `module` is `torch.cuda` or `torch.npu`,
    None on a CPU-only host (no streams, no events: everything is done when it returns)."""

    name: str
    device: torch.device
    module: Any | None = None

    @property
    def has_streams(self) -> bool:
        return self.module is not None

    @property
    def pins_memory(self) -> bool:
        return self.module is not None

    def new_stream(self) -> Any | None:
        return self.module.Stream(device=self.device) if self.module is not None else None

    def current_stream(self) -> Any | None:
        return self.module.current_stream(self.device) if self.module is not None else None

    def use_stream(self, stream: Any | None) -> Any:
        if self.module is None or stream is None:
            return nullcontext()
        return self.module.stream(stream)

    def record_event(self, stream: Any | None) -> Any | None:
        if self.module is None:
            return None
        event = self.module.Event()
        event.record(stream)
        return event

    def record_stream(self, tensor: torch.Tensor, stream: Any | None) -> None:
        if stream is not None:
            tensor.record_stream(stream)


def detect_backend(prefer: str | None = None) -> Backend:
    """Ascend if `torch_npu` sees a device, then CUDA, then the CPU; `prefer` ("npu",
    "cuda" or "cpu") picks one, or raises RuntimeError when it is not there."""
    if prefer in (None, "npu"):
        try:
            import torch_npu  # type: ignore[import-not-found]  # noqa: F401

            npu = getattr(torch, "npu", None)
            if npu is not None and npu.is_available():
                return Backend("npu", torch.device("npu", npu.current_device()), npu)
        except ImportError:
            pass
        if prefer == "npu":
            raise RuntimeError("no Ascend NPU: torch_npu is missing or sees no device")
    if prefer in (None, "cuda"):
        if torch.cuda.is_available():
            return Backend("cuda", torch.device("cuda", torch.cuda.current_device()), torch.cuda)
        if prefer == "cuda":
            raise RuntimeError("no CUDA device visible to torch")
    if prefer not in (None, "cpu"):
        raise RuntimeError(f"unknown backend {prefer!r}: use 'npu', 'cuda' or 'cpu'")
    return Backend("cpu", torch.device("cpu"))


@dataclass
class _Slot:
    storage: torch.Tensor
    event: Any | None = None  # the copy out of this buffer; reuse only after it completes


class PinnedBuffers:
    """A ring of host staging buffers, pinned where a device exists: made once (pinning is
    slow), grown only for a larger batch, and reused only once the event of the copy out
    of it has completed."""

    def __init__(self, backend: Backend, count: int = 4) -> None:
        if count < 1:
            raise ValueError("PinnedBuffers needs count >= 1")
        self.backend = backend
        self._slots: list[_Slot | None] = [None] * count
        self._next = 0
        self._lock = threading.Lock()
        self.allocations = 0

    @contextmanager
    def staged(self, like: torch.Tensor) -> Iterator[tuple[torch.Tensor, _Slot]]:
        """A buffer shaped like `like`, holding a copy of it; the slot takes the copy's event."""
        nbytes = like.numel() * like.element_size()
        with self._lock:
            i = self._next
            self._next = (i + 1) % len(self._slots)
            slot = self._slots[i]
            if slot is not None and slot.event is not None:
                slot.event.synchronize()  # this one earlier copy, not the whole device
            if slot is None or slot.storage.numel() < nbytes:
                pin = self.backend.pins_memory
                slot = _Slot(torch.empty(max(nbytes, 1), dtype=torch.uint8, pin_memory=pin))
                self._slots[i] = slot
                self.allocations += 1
            slot.event = None
            view = slot.storage[:nbytes].view(like.dtype).view(like.shape)
            view.copy_(like)
            yield view, slot


@dataclass
class DeviceBatch:
    """A tensor on the device plus the event that says when it is really there."""

    tensor: torch.Tensor
    event: Any | None
    backend: Backend

    def wait(self, stream: Any | None = None) -> torch.Tensor:
        """The tensor, safe to use on `stream` (default: the current one): the stream waits
        on the device, the host goes on, and `record_stream` keeps the memory from early reuse."""
        s = stream if stream is not None else self.backend.current_stream()
        if self.event is not None and s is not None:
            s.wait_event(self.event)
        self.backend.record_stream(self.tensor, s)
        return self.tensor

    def synchronize(self) -> torch.Tensor:
        """Block the host until this batch only is done (for stages that read on the host)."""
        if self.event is not None:
            self.event.synchronize()
        return self.tensor

    def ready(self) -> bool:
        return self.event is None or bool(self.event.query())


def mark(tensor: torch.Tensor, backend: Backend, stream: Any | None = None) -> DeviceBatch:
    """Record an event after the work queued so far on `stream` (default: current)."""
    s = stream if stream is not None else backend.current_stream()
    return DeviceBatch(tensor, backend.record_event(s), backend)


class HostToDevice:
    """Host tensors → device tensors through pinned buffers on a side stream (the stage
    before the model; the model stage calls `batch.wait()`)."""

    def __init__(self, backend: Backend | None = None, buffers: int = 4) -> None:
        self.backend = backend if backend is not None else detect_backend()
        self.stream = self.backend.new_stream()
        self.buffers = PinnedBuffers(self.backend, buffers)

    def __call__(self, host: torch.Tensor) -> DeviceBatch:
        be = self.backend
        with self.buffers.staged(host.contiguous()) as (staged, slot):
            with be.use_stream(self.stream):
                # on the CPU the staging buffer is reused, so the "device" tensor is a copy
                dev = staged.to(be.device, non_blocking=True) if be.has_streams else staged.clone()
                event = be.record_event(self.stream)
            slot.event = event
        return DeviceBatch(dev, event, be)


class DeviceToHost:
    """Device results → host tensors with a non-blocking copy and a wait on one event."""

    def __init__(self, backend: Backend | None = None) -> None:
        self.backend = backend if backend is not None else detect_backend()
        self.stream = self.backend.new_stream()

    def __call__(self, batch: DeviceBatch) -> torch.Tensor:
        be = self.backend
        if not be.has_streams:
            return batch.synchronize()
        with be.use_stream(self.stream):
            src = batch.wait(self.stream)
            host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
            host.copy_(src, non_blocking=True)
            event = be.record_event(self.stream)
        assert event is not None
        event.synchronize()
        return host


def device_stage(
    model: Callable[[torch.Tensor], torch.Tensor], backend: Backend | None = None
) -> Callable[[DeviceBatch], DeviceBatch]:
    """Wrap a model as a pipeline stage function: wait for the input's event, run, mark."""
    be = backend if backend is not None else detect_backend()

    def forward(batch: DeviceBatch) -> DeviceBatch:
        with torch.inference_mode():
            out = model(batch.wait())
        return mark(out, be)

    forward.__name__ = getattr(model, "__name__", type(model).__name__)
    return forward
