"""Device helpers for the stages around a model: copies that overlap, waits that don't stall.

The host side of a device pipeline loses time in three places: pageable host memory (the
driver copies it once more before the DMA), host→device copies on the compute stream
(the model waits for them), and whole-device synchronisation (every stream waits for
every other). These helpers avoid all three:

* `HostToDevice` stages host tensors through reusable pinned buffers and copies them with
  `non_blocking=True` on a side stream, recording one event per batch;
* `DeviceBatch.wait()` makes the consuming stream wait for that event on the device (the
  host does not block) and calls `record_stream`, so the caching allocator does not hand
  the memory to someone else while the consumer still uses it;
* a pinned buffer is reused only once the event of the copy out of it has completed;
* `DeviceBatch.synchronize()` blocks the host on one event only, never on the device.

CUDA and Ascend (`torch_npu`) are used when present; on a CPU-only host the same code runs
with plain memory and no streams, so a pipeline written against these helpers runs (and is
tested) anywhere. Import this module only where torch is installed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
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
    """The accelerator a pipeline talks to, behind one small interface.

    `module` is `torch.cuda` or `torch.npu` (both offer Stream, Event, stream(),
    current_stream()); None on a CPU-only host, where streams and events do not exist and
    every operation is already complete when it returns.
    """

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
    """Ascend if `torch_npu` is importable and sees a device, then CUDA, then the CPU.

    `prefer` ("npu", "cuda" or "cpu") picks one explicitly; asking for one that is not
    there raises RuntimeError rather than silently running somewhere else.
    """
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
    """A ring of host staging buffers, pinned where a device exists, reused across batches.

    Allocating pinned memory is slow (it is registered with the driver), so buffers are
    made once and grown only when a batch is larger than any before. A buffer is handed
    out again only after the event of the copy out of it has completed: waiting on that
    one event is what makes reuse safe without a device-wide synchronise.
    """

    def __init__(self, backend: Backend, count: int = 4) -> None:
        if count < 1:
            raise ValueError("PinnedBuffers needs count >= 1")
        self.backend = backend
        self._slots: list[_Slot | None] = [None] * count
        self._next = 0
        self._lock = threading.Lock()
        self.allocations = 0

    def _alloc(self, nbytes: int) -> torch.Tensor:
        self.allocations += 1
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.backend.pins_memory)

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
                slot = _Slot(self._alloc(max(nbytes, 1)))
                self._slots[i] = slot
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
    meta: dict[str, Any] = field(default_factory=dict)

    def wait(self, stream: Any | None = None) -> torch.Tensor:
        """The tensor, safe to use on `stream` (default: the current one).

        The stream waits for the event on the device; the host goes on at once. The
        tensor is recorded as used on that stream so its memory is not reused early.
        """
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
    """Host tensors → device tensors through pinned buffers on a side stream.

    Use it as the function of the stage before the model, or call it inside one; the model
    stage calls `batch.wait()` before using the tensor.
    """

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

    def many(self, hosts: Sequence[torch.Tensor]) -> list[DeviceBatch]:
        return [self(h) for h in hosts]


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
