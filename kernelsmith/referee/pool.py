"""A machine's evaluation capacity: requests spread over its GPUs, with one timing lease per GPU.

A request is an `EvalRequest` (kernelsmith.settings), or its dict form as it crosses HTTP and Ray:
`{"task_source", "task_name", "candidate_source", "options": {EvalSettings fields}, "overrides": {NAME: value}}`.
`LocalPool.run(request)` evaluates it on the least busy GPU (or on the CPU) and returns the verdict as a dict.
Each evaluation still runs in fresh child processes (see evaluation.py): that is what makes the referee
hard to game, so the pool's gain is concurrency — compilation, reference runs and correctness trials of
several candidates overlap on a GPU while the lease keeps every timing phase alone on its GPU.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kernelsmith.referee.lease import lease_for
from kernelsmith.referee.verdict import Status, Verdict
from kernelsmith.settings import EvalRequest, EvalSettings, SettingsError

log = logging.getLogger(__name__)

# The options a request may set (kernelsmith.settings.EvalSettings); the rest (GPU, lease, spares) is the pool's.
REQUEST_OPTIONS = set(EvalSettings.model_fields)


class RequestError(ValueError):
    """A request that cannot be evaluated (bad task, bad option); the message says which and why."""


def options_from(request: dict[str, Any], device: str) -> Any:
    """The request's settings (validated by the one settings model) as this pool's `EvalOptions`."""
    from kernelsmith.referee.evaluation import EvalOptions

    given = dict(request.get("options") or {})
    unknown = sorted(set(given) - REQUEST_OPTIONS)
    if unknown:
        raise RequestError(f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(REQUEST_OPTIONS))}")
    given.setdefault("device", device)
    try:
        settings = EvalSettings(**given)
    except SettingsError as exc:
        raise RequestError(str(exc)) from None
    if settings.device != device:
        raise RequestError(f"option device={settings.device!r}, but this pool evaluates on {device!r}")
    return EvalOptions.of(settings)


def load_task(request: dict[str, Any], device: str) -> Any:
    """The request's task, checked as `kernelsmith eval` checks a task file."""
    from kernelsmith.task import Task, TaskError

    source = request.get("task_source")
    if not isinstance(source, str) or not source.strip():
        raise RequestError("task_source: missing or empty")
    name = str(request.get("task_name") or "task")
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80] or "task"
    with tempfile.TemporaryDirectory(prefix="kernelsmith-task-") as tmp:
        path = Path(tmp) / (safe if safe.endswith(".py") else safe + ".py")
        path.write_text(source)
        try:
            return Task.load(path, request.get("overrides") or None, device=device)
        except TaskError as exc:
            raise RequestError(f"task {name}: {exc}") from None


def parse_request(request: dict[str, Any], device: str) -> tuple[Any, Any]:
    """(EvalOptions, Task) for a request, or RequestError for one that cannot be evaluated; nothing runs.

    A candidate that does not even parse is not a bad request: that is its verdict (`compile_error`)."""
    opts = options_from(request, device)
    task = load_task(request, device)
    source = request.get("candidate_source")
    if not isinstance(source, str) or not source.strip():
        raise RequestError("candidate_source: missing or empty")
    return opts, task


def check_request(request: dict[str, Any], device: str) -> None:
    """Raise RequestError now (at submission) for a request that cannot be evaluated."""
    parse_request(request, device)


MAX_AUTO_SLOTS = 12  # per GPU: 39 verdicts/min on the H200's mixed batch with 12, 29 with 8 (docs/benchmarks.md)


def auto_slots(n_gpus: int, cores: int | None = None) -> int:
    """Evaluations in flight per GPU when none is asked for: the host's cores but two, shared among its GPUs,
    between 2 and `MAX_AUTO_SLOTS` (each slot compiles and checks on a core; timing still runs alone)."""
    cores = cores if cores is not None else (os.cpu_count() or 4)
    return max(2, min(MAX_AUTO_SLOTS, (cores - 2) // max(1, n_gpus)))


class LocalPool:
    """Evaluations on this machine: `slots_per_gpu` at a time on each GPU (or `cpu_slots` on the CPU)."""

    def __init__(self, device: str = "cuda", gpus: list[int] | None = None, slots_per_gpu: int | None = None,
                 cpu_slots: int = 2, warm: int | None = None):
        """`slots_per_gpu`: None for `auto_slots`; `warm`: sandboxes kept started ahead per kind (default: one
        per slot)."""
        if device == "cuda" and gpus is None:
            import torch

            gpus = list(range(torch.cuda.device_count()))
            if not gpus:
                raise RequestError("device cuda: torch sees no GPU here (evaluate with --device cpu)")
        if slots_per_gpu is None:
            slots_per_gpu = auto_slots(len(gpus or []) or 1)
        self.device = device
        self.gpus = gpus if device == "cuda" else []
        from kernelsmith.referee.evaluation import lease_key

        self.leases = {g: lease_for(lease_key(g)) for g in self.gpus}  # the process's: whoever else submits here
        self.capacity = len(self.gpus) * slots_per_gpu if self.gpus else cpu_slots
        self.slots = slots_per_gpu if self.gpus else cpu_slots
        self.warm = self.slots if warm is None else max(0, warm)
        self._busy = {g: 0 for g in self.gpus}
        self._lock = threading.Lock()
        self.completed = 0
        self.eval_seconds = 0.0

    def _pick(self) -> int | None:
        if not self.gpus:
            return None
        with self._lock:
            gpu = min(self.gpus, key=lambda g: self._busy[g])
            self._busy[gpu] += 1
            return gpu

    def run(self, request: EvalRequest | dict[str, Any]) -> dict[str, Any]:
        """Evaluate one request. A bad request comes back as `{"status": "bad_request", "error": ...}`."""
        from kernelsmith.candidate import Candidate
        from kernelsmith.referee.evaluation import evaluate

        if isinstance(request, EvalRequest):
            request = request.to_dict()
        try:
            opts, task = parse_request(request, self.device)
        except RequestError as exc:
            return {"status": "bad_request", "correct": False, "error": str(exc)}
        gpu = self._pick()
        opts.gpu, opts.lease = gpu, self.leases.get(gpu) if gpu is not None else None
        opts.warm = self.warm  # sandboxes started ahead: the next evaluation starts at once
        t0 = time.monotonic()
        try:
            verdict = evaluate(task, Candidate(request["candidate_source"], "candidate"), opts).to_dict()
        except Exception as exc:  # noqa: BLE001 - the referee's own failure: this verdict, not the whole batch
            log.exception("referee failure on %s", request.get("task_name") or "a request")
            verdict = Verdict(Status.CRASHED, error=f"referee failure (not the candidate's): "
                              f"{type(exc).__name__}: {exc}"[:500]).to_dict()
        finally:
            with self._lock:
                if gpu is not None:
                    self._busy[gpu] -= 1
                self.completed += 1
                self.eval_seconds += time.monotonic() - t0
        if gpu is not None:
            verdict["gpu"] = gpu
        return verdict

    def warm_up(self, settings: EvalSettings | None = None) -> float:
        """Start each GPU's sandbox template now (an interpreter with torch and triton imported: 5-9 s), so the
        first evaluations do not queue behind it; returns the seconds taken. Optional: evaluations start it on
        first use otherwise. A long-lived pool (the service, a run) pays this once."""
        from kernelsmith.referee.evaluation import EvalOptions
        from kernelsmith.referee.sandbox import zygote_for

        t0 = time.monotonic()
        limits = EvalOptions.of(settings or EvalSettings()).limits
        for gpu in self.gpus or [None]:
            zygote_for(self.device, gpu, limits)
        return time.monotonic() - t0

    def evaluate_many(self, requests: list[EvalRequest | dict[str, Any]]) -> list[dict[str, Any]]:
        """All requests, `capacity` at a time; verdicts in request order."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, self.capacity)) as ex:
            return list(ex.map(self.run, requests))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"device": self.device, "gpus": self.gpus, "capacity": self.capacity,
                    "busy": dict(self._busy), "completed": self.completed,
                    "eval_seconds": round(self.eval_seconds, 3),
                    "timing_lease_seconds": {g: round(lease.exclusive_s, 3) for g, lease in self.leases.items()}}
