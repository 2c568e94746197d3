"""Run torchrun's own `--numa-binding` code (torch.numa.binding) over a fake host.

The module reads sysfs with `open` / `os.listdir`, the allowed CPUs with
`os.sched_getaffinity` and GPU PCI addresses from `torch.cuda`; those four names are
swapped for the snapshot's answers, so the reference computes its CPU sets for exactly the
facts our planner sees. Needs torch (any build, CPU-only is fine); tests skip without it.
"""

from __future__ import annotations

import io
import os
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from unittest import mock


class TorchrunError(Exception):
    """torchrun would have failed this GPU's worker (any exception, or an empty CPU set)."""


@contextmanager
def _patched(binding: Any, snapshot: Mapping[str, Any], pcis: Sequence[str]) -> Iterator[None]:
    files: Mapping[str, str] = snapshot["files"]
    dirs: Mapping[str, list[str]] = snapshot["dirs"]
    status = files["/proc/self/status"]
    allowed_text = next(
        ln.split(":", 1)[1].strip()
        for ln in status.splitlines()
        if ln.startswith("Cpus_allowed_list")
    )
    allowed = binding._get_set_of_int_from_ranges_str(allowed_text)

    def fake_open(path: str, *args: Any, **kwargs: Any) -> io.StringIO:
        if path not in files:
            raise FileNotFoundError(path)
        return io.StringIO(files[path])

    def fake_listdir(path: str) -> list[str]:
        if path not in dirs:
            raise FileNotFoundError(path)
        return list(dirs[path])

    def props(index: int) -> Any:
        domain, bus, rest = pcis[index].split(":")
        device = rest.split(".")[0]
        return types.SimpleNamespace(
            pci_domain_id=int(domain, 16), pci_bus_id=int(bus, 16), pci_device_id=int(device, 16)
        )

    fake_os = types.SimpleNamespace(
        listdir=fake_listdir, path=os.path, sched_getaffinity=lambda _pid: set(allowed)
    )
    fake_torch = types.SimpleNamespace(
        cuda=types.SimpleNamespace(get_device_properties=props, device_count=lambda: len(pcis))
    )
    with (
        mock.patch.object(binding, "open", fake_open, create=True),
        mock.patch.object(binding, "os", fake_os),
        mock.patch.object(binding, "torch", fake_torch),
    ):
        yield


def torchrun_sets(
    snapshot: Mapping[str, Any], pcis: Sequence[str], mode: str
) -> list[set[int] | TorchrunError]:
    """torchrun's CPU set for each CUDA ordinal (pcis[i] is `cuda:i`), or its failure."""
    from torch.numa import binding

    options = binding.NumaOptions(affinity_mode=binding.AffinityMode(mode))
    out: list[set[int] | TorchrunError] = []
    with _patched(binding, snapshot, pcis):
        for ordinal in range(len(pcis)):
            try:
                cpus = set(
                    binding._get_logical_cpus_to_bind_to(gpu_index=ordinal, numa_options=options)
                )
            except Exception as exc:  # the reference fails in many ways; all mean "no binding"
                out.append(TorchrunError(f"{type(exc).__name__}: {exc}"))
                continue
            out.append(cpus if cpus else TorchrunError("empty CPU set"))
    return out
