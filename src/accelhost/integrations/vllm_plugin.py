"""vLLM plugin: every worker binds itself to its device's CPUs after warm-up.

The `vllm.general_plugins` entry point `accelhost`, loaded in every vLLM process; it does
nothing unless ACCELHOST_PLAN names a plan file. Then it wraps `compile_or_warm_up_model`
(the last step of a worker's start-up, so the runtime's threads exist) and after it binds
the worker with `bind_current_process`, logging one line; a failure is logged, never
raised: the engine keeps serving. vllm-ascend's own binding (`enable_cpu_binding`) would
fight it, so the plugin turns that off in the worker and says so.

Environment: ACCELHOST_PLAN (the plan file), ACCELHOST_MIGRATE_BUDGET_MS (memory
migration budget; 0 skips migration), ACCELHOST_BIND_IRQ=1 (also bind the device's IRQs).
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelhost.apply.steps import ApplyReport

ENV_PLAN = "ACCELHOST_PLAN"
ENV_BUDGET = "ACCELHOST_MIGRATE_BUDGET_MS"
ENV_IRQ = "ACCELHOST_BIND_IRQ"
HOOK = "compile_or_warm_up_model"
_MARK = "_accelhost_bind_installed"

# A child of vLLM's logger, so the line shows up with vLLM's own (same handler, format).
log = logging.getLogger("vllm.accelhost")

ASCEND_OFF = (
    "vllm-ascend's own CPU binding (enable_cpu_binding) turned off in this worker: accelhost "
    "binds it from ACCELHOST_PLAN instead. To keep vllm-ascend's, unset ACCELHOST_PLAN"
)
ASCEND_ADVICE = (
    "vllm-ascend binds CPUs itself after warm-up: start vLLM with --additional-config "
    "'{\"enable_cpu_binding\": false}' so it does not fight accelhost's binding"
)


def register() -> None:
    """The entry point vLLM calls in each of its processes."""
    path = os.environ.get(ENV_PLAN, "").strip()
    if not path:
        return
    try:
        wrapper = importlib.import_module("vllm.v1.worker.worker_base").WorkerWrapperBase
    except Exception as exc:  # an incompatible vLLM must still start
        log.warning("accelhost: %s is set but vLLM's worker cannot be hooked (%r)", ENV_PLAN, exc)
        return
    install(wrapper, path)


def install(wrapper_cls: type, plan_path: str) -> bool:
    """Wrap the warm-up of `wrapper_cls` so that a bind follows it; False if already done.
    The wrapper forwards unknown attributes to the worker, so this serves every worker."""
    if getattr(wrapper_cls, _MARK, False):
        return False
    own = wrapper_cls.__dict__.get(HOOK)

    def compile_or_warm_up_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        worker = getattr(self, "worker", self)
        before_warm_up()
        call: Callable[..., Any] = own.__get__(self) if own is not None else getattr(worker, HOOK)
        result = call(*args, **kwargs)
        bind_worker(worker, plan_path)
        return result

    compile_or_warm_up_model.__doc__ = "vLLM's warm-up, then accelhost's bind (ACCELHOST_PLAN)."
    setattr(wrapper_cls, HOOK, compile_or_warm_up_model)
    setattr(wrapper_cls, _MARK, True)
    return True


def before_warm_up() -> None:
    """On vllm-ascend, turn its own CPU binding off (it would run inside the warm-up)."""
    try:
        if importlib.util.find_spec("vllm_ascend") is None:
            return
    except (ImportError, ValueError):
        return
    try:
        config = importlib.import_module("vllm_ascend.ascend_config").get_ascend_config()
        if getattr(config, "enable_cpu_binding", False):
            config.enable_cpu_binding = False
            log.warning("accelhost: %s", ASCEND_OFF)
    except Exception:  # an older or newer vllm-ascend: say what to do instead
        log.warning("accelhost: %s", ASCEND_ADVICE)


class _ToVllm(logging.Handler):
    """Hands the applier's warnings to vLLM's logger, so they carry the worker's prefix.
    Only the first "step failed" goes through: a refused plan fails one step per thread."""

    step_failures = 0

    def emit(self, record: logging.LogRecord) -> None:
        if str(record.msg).startswith("step failed"):
            self.step_failures += 1
            if self.step_failures > 1:
                return
        log.handle(record)


def bind_worker(worker: Any, plan_path: str) -> None:
    """Bind this worker process; one log line either way (and the applier's warnings,
    through vLLM's logger when nothing else shows them). Never raises."""
    applier, forward = logging.getLogger("accelhost.apply"), _ToVllm(logging.WARNING)
    if not applier.hasHandlers():
        applier.addHandler(forward)
    try:
        from accelhost.apply.worker import bind_current_process

        local_rank = int(worker.local_rank)
        device = getattr(worker, "device", None)
        backend = str(getattr(device, "type", device) or "unknown")
        budget = int(os.environ.get(ENV_BUDGET, "") or -1)
        kwargs: dict[str, Any] = {
            "irq": os.environ.get(ENV_IRQ, "") == "1",
            "migrate_memory": budget != 0,
        }
        if budget > 0:
            kwargs["migrate_budget_ms"] = budget
        if backend == "cpu":
            kwargs["device"] = local_rank
            how = f"{backend} backend: local rank {local_rank} is the device id"
        else:
            kwargs["local_rank"] = local_rank
            how = f"{backend} backend, local rank {local_rank}"
        report = bind_current_process(plan_path, **kwargs)
        level, line = summary(report, os.getpid(), how)
        log.log(level, "accelhost: %s", line)
    except Exception as exc:  # the engine must keep serving whatever went wrong here
        log.warning("accelhost: binding this worker failed, the engine goes on unbound: %r", exc)
    finally:
        applier.removeHandler(forward)  # a no-op when it was not added


def summary(report: ApplyReport, pid: int, how: str) -> tuple[int, str]:
    """(log level, one line): what the bind did. A worker none of whose threads moved is
    "not bound", at WARNING: it must not read as a successful bind. So is an Ascend 950 worker
    whose plan was skipped, though the host's UVB poll threads are pinned, as vllm-ascend does."""
    from accelhost.cpulist import format_cpulist

    if report.skipped:
        return logging.WARNING, f"worker {pid} not bound ({how}): {report.skipped}"
    threads = [r for r in report.results if r.step.kind == "thread"]
    ok = [r for r in threads if r.status == "ok"]
    cpus = format_cpulist(c for r in ok for c in getattr(r.step, "cpus", ()))
    not_bound = f"worker {pid} not bound to device {report.device} ({how})"
    if report.worker_skipped:
        host = f"no host thread pinned ({len(threads)} found)"
        if ok:
            host = f"{len(ok)} of {len(threads)} host threads pinned to CPUs {cpus}"
        why = f"worker CPU binding skipped: {report.worker_skipped}"
        return logging.WARNING, f"{not_bound}: {why}; {host}"
    if threads and not ok:
        first = threads[0]
        wanted = format_cpulist(getattr(first.step, "cpus", ()))
        return logging.WARNING, f"{not_bound}: CPUs {wanted or '-'}: {first.detail or first.status}"
    failed = report.failed
    tail = f"; {len(failed)} step(s) failed (see warnings)" if failed else ""
    memory = next((r for r in report.results if r.step.kind == "memory"), None)
    mem = f"; memory: {memory.status}" if memory is not None else ""
    return logging.WARNING if failed else logging.INFO, (
        f"bound worker {pid} to device {report.device} ({how}) after warm-up: "
        f"{len(ok)} of {len(threads)} threads on CPUs {cpus or '-'}{mem}{tail}"
    )
