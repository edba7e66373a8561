"""The RL reward: a completion is parsed into a program and judged by the referee against the task.

`KernelReward` is a TRL `reward_funcs` entry: `reward(prompts, completions, **columns) -> list[float]`, with a
`__name__`; GRPOTrainer passes the dataset's extra columns (`kernelsmith data rl` writes them: `task_source`,
`task_name`, `parent_code`, `parent_speedup`, `eval_options`, `response_mode`) as keyword lists, one entry per
completion; a row carrying only verl's `reward_model.ground_truth` works too. `compute_score` is the verl form.

Reward (higher is better; every failure is below every correct program, and a cheat is lowest):

    rejected (a guard caught a cheat)     -1.0
    unparseable (no program in the text)  -0.8
    compile_error                         -0.6
    runtime_error / crashed / timeout     -0.4
    incorrect                             -0.2
    correct                               0.5 + clip(log2(speedup / parent speedup), -0.5, 3.0)   -> [0, 3.5]

`log2` of the ratio is symmetric (2x faster +1, 2x slower -1) and the clip keeps a slow correct program above
every failure and bounds outliers. The baseline is the parent's speedup when the row has one; a first step's
parent is the PyTorch reference (speedup 1), so its speedup is the ratio. When the referee measures no speedup
(CPU: the Triton interpreter is not timed) a correct program gets 0.5, and likewise when the parent's speedup
is unknown but the parent is a Triton program (no honest baseline).

Batches: the completions of one call are parsed here and judged together through a pluggable evaluator —
`Callable[[list[tuple[task_source, candidate_source, options]]], list[verdict dict]]`, options being a dict of
`EvalOptions` fields plus `task_name`. The same program for the same task is judged once per call. The
default `LocalEvaluator` sends each through the referee's `LocalPool` (each evaluation runs in its own
sandboxes; the pool holds each GPU's timing lease). With `service_url` the reward uses the referee service instead
(`kernelsmith.referee.client.RefereeClient(base_url, token).evaluate_many(items)`).

An evaluator failure (an exception, or a result with status "evaluator_error") is not the model's fault: by
default the reward raises (training stops rather than learn from a broken referee); `on_evaluator_error="none"`
returns None for those completions (TRL turns None into NaN and ignores it).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kernelsmith.candidate import Candidate
from kernelsmith.workshop.parse import ParseError, parse_response

EvalItem = tuple[str, str, dict[str, Any]]  # (task_source, candidate_source, options)
Evaluator = Callable[[list[EvalItem]], list[dict[str, Any]]]

UNPARSEABLE = "unparseable"
EVALUATOR_ERROR = "evaluator_error"
STAGE_REWARDS: dict[str, float] = {
    "rejected": -1.0,
    UNPARSEABLE: -0.8,
    "compile_error": -0.6,
    "runtime_error": -0.4,
    "crashed": -0.4,
    "timeout": -0.4,
    "incorrect": -0.2,
}
CORRECT_BASE = 0.5
LOG_RATIO_CLIP = (-0.5, 3.0)


def reward_for(status: str, speedup: float | None = None, baseline: float | None = None) -> float:
    """The reward of one judged completion (see the module docstring); unknown statuses score as a cheat."""
    if status != "correct":
        return STAGE_REWARDS.get(status, STAGE_REWARDS["rejected"])
    if speedup is None or not math.isfinite(speedup) or speedup <= 0 or baseline is None or baseline <= 0:
        return CORRECT_BASE
    lo, hi = LOG_RATIO_CLIP
    return CORRECT_BASE + min(hi, max(lo, math.log2(speedup / baseline)))


class LocalEvaluator:
    """Runs the referee here, through the pool (the one way into evaluation: it places work on the GPUs and
    holds each GPU's timing lease), `max_workers` at a time."""

    def __init__(self, max_workers: int = 4):
        self.max_workers = max(1, int(max_workers))
        self._pools: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _pool(self, device: str) -> Any:
        from kernelsmith.referee.pool import LocalPool

        with self._lock:
            if device not in self._pools:
                self._pools[device] = LocalPool(device, slots_per_gpu=self.max_workers, cpu_slots=self.max_workers)
            return self._pools[device]

    def _one(self, item: EvalItem) -> dict[str, Any]:
        from kernelsmith.settings import EvalRequest

        task_source, candidate_source, options = item
        opts = dict(options)
        name = str(opts.pop("task_name", "task"))
        try:
            request = EvalRequest(task_source=task_source, task_name=name, candidate_source=candidate_source,
                                  options=opts)
            verdict = self._pool(request.options.device).run(request)
        except Exception as exc:  # noqa: BLE001 - reported as the evaluator's failure, not the model's
            return {"status": EVALUATOR_ERROR, "error": f"{type(exc).__name__}: {exc}"}
        if verdict.get("status") == "bad_request":  # the row's settings or task, not the completion
            return {"status": EVALUATOR_ERROR, "error": f"bad request: {verdict.get('error')}"}
        return verdict

    def __call__(self, items: list[EvalItem]) -> list[dict[str, Any]]:
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_workers, len(items))) as pool:
            return list(pool.map(self._one, items))


class ServiceEvaluator:
    """The referee service: `RefereeClient(base_url, token).evaluate_many(items)`, one request per batch."""

    def __init__(self, service_url: str, token: str | None = None):
        from kernelsmith.referee.client import RefereeClient  # the service's client (another part)

        self.client = RefereeClient(service_url, token)

    def __call__(self, items: list[EvalItem]) -> list[dict[str, Any]]:
        payload = []
        for task_source, candidate_source, options in items:
            opts = dict(options)
            name = str(opts.pop("task_name", "task"))
            payload.append({"task_source": task_source, "task_name": name, "candidate_source": candidate_source,
                            "options": opts})
        return list(self.client.evaluate_many(payload))


def completion_text(completion: Any) -> str:
    """A completion as TRL passes it: a string, or chat messages (the last assistant turn's content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return str(completion.get("content", ""))
    if isinstance(completion, Sequence):
        for m in reversed(list(completion)):
            if isinstance(m, dict) and m.get("role", "assistant") == "assistant":
                return str(m.get("content", ""))
    return str(completion or "")


def _spec(kwargs: dict[str, Any], i: int) -> dict[str, Any]:
    """Everything one completion's reward needs, from the flat columns or verl's `reward_model.ground_truth`."""
    if "task_source" in kwargs:
        spec = {k: kwargs[k][i] for k in ("task_source", "task_name", "parent_code", "parent_speedup",
                                           "parent_status", "eval_options", "response_mode") if k in kwargs}
    elif "reward_model" in kwargs:
        gt = kwargs["reward_model"][i]["ground_truth"]
        spec = json.loads(gt) if isinstance(gt, str) else dict(gt)
    elif "ground_truth" in kwargs:
        gt = kwargs["ground_truth"][i]
        spec = json.loads(gt) if isinstance(gt, str) else dict(gt)
    else:
        raise ValueError("the reward needs the task: dataset columns task_source (as `kernelsmith data rl` writes "
                         "them) or reward_model.ground_truth")
    opts = spec.get("eval_options") or {}
    spec["eval_options"] = json.loads(opts) if isinstance(opts, str) else dict(opts)
    return spec


class KernelReward:
    """Referee-judged reward for TRL (`reward_funcs=[KernelReward()]`) and, through `compute_score`, verl.

    `history` holds one record per scored completion (`status`, `reward`, `speedup`, `baseline`, `judged` — True
    when the referee produced the verdict — and `error`); `counts` counts statuses; `evaluations` counts programs
    sent to the evaluator.
    """

    __name__ = "kernelsmith_reward"

    def __init__(self, evaluator: Evaluator | None = None, *, service_url: str | None = None,
                 token: str | None = None, max_workers: int = 4, device: str | None = None,
                 timeout_s: float | None = None, trials: int | None = None,
                 on_evaluator_error: str = "raise", keep_history: int = 10000):
        if on_evaluator_error not in ("raise", "none"):
            raise ValueError(f"on_evaluator_error {on_evaluator_error!r}: expected 'raise' or 'none'")
        if evaluator is not None and service_url is not None:
            raise ValueError("give an evaluator or a service_url, not both")
        if service_url is not None:
            evaluator = ServiceEvaluator(service_url, token)
        self.evaluator: Evaluator = evaluator or LocalEvaluator(max_workers)
        self.overrides = {k: v for k, v in (("device", device), ("timeout_s", timeout_s), ("trials", trials))
                          if v is not None}
        self.on_evaluator_error = on_evaluator_error
        self.keep_history = keep_history
        self.history: list[dict[str, Any]] = []
        self.counts: Counter = Counter()
        self.evaluations = 0
        self.calls = 0

    def __call__(self, prompts: list[Any] | None = None, completions: list[Any] | None = None,
                 **kwargs: Any) -> list[float | None]:
        completions = list(completions or [])
        self.calls += 1
        records: list[dict[str, Any]] = []
        todo: dict[tuple[str, str, str], list[int]] = {}
        items: list[EvalItem] = []
        for i, comp in enumerate(completions):
            spec = _spec(kwargs, i)
            base = Candidate(spec.get("parent_code") or "")
            rec: dict[str, Any] = {"status": UNPARSEABLE, "reward": None, "speedup": None, "judged": False,
                                   "error": "", "task": spec.get("task_name", "")}
            parent_speedup = spec.get("parent_speedup")
            rec["baseline"] = (parent_speedup if parent_speedup else
                               (1.0 if "triton.jit" not in (spec.get("parent_code") or "") else None))
            try:
                cand = parse_response(completion_text(comp), base, spec.get("response_mode") or "full").candidate
            except ParseError as exc:
                rec["error"] = str(exc)
                records.append(rec)
                continue
            options = {**spec["eval_options"], **self.overrides, "task_name": spec.get("task_name") or "task"}
            key = (hashlib.sha256(spec["task_source"].encode()).hexdigest(), cand.digest,
                   json.dumps(options, sort_keys=True))
            if key not in todo:
                todo[key] = []
                items.append((spec["task_source"], cand.source, options))
            todo[key].append(i)
            records.append(rec)
        verdicts = self.evaluator(items) if items else []
        if len(verdicts) != len(items):
            raise RuntimeError(f"the evaluator returned {len(verdicts)} verdicts for {len(items)} programs")
        self.evaluations += len(items)
        failures = []
        for (_, idxs), v in zip(todo.items(), verdicts):
            status = str(v.get("status", EVALUATOR_ERROR))
            for i in idxs:
                rec = records[i]
                rec.update(status=status, speedup=v.get("speedup"), error=str(v.get("error") or ""),
                           judged=status != EVALUATOR_ERROR)
                if status == EVALUATOR_ERROR:
                    failures.append(rec["error"])
        for rec in records:
            if rec["status"] != EVALUATOR_ERROR:
                rec["reward"] = reward_for(rec["status"], rec["speedup"], rec["baseline"])
        if failures and self.on_evaluator_error == "raise":
            raise RuntimeError(f"the referee failed on {len(failures)} program(s): {failures[0]}")
        self.counts.update(r["status"] for r in records)
        self.history.extend(records)
        del self.history[:-self.keep_history]
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and records:
            log_metric("kernelsmith/correct_frac", sum(r["status"] == "correct" for r in records) / len(records))
            log_metric("kernelsmith/parsed_frac", sum(r["status"] != UNPARSEABLE for r in records) / len(records))
        return [r["reward"] for r in records]


_DEFAULT: KernelReward | None = None


def compute_score(data_source: str, solution_str: str, ground_truth: str | dict[str, Any],
                  extra_info: dict[str, Any] | None = None) -> float:
    """verl's custom reward function: one completion against the row's `reward_model.ground_truth`."""
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = KernelReward(on_evaluator_error="raise")
    r = _DEFAULT(prompts=[None], completions=[solution_str], ground_truth=[ground_truth])[0]
    return float(r) if r is not None else float("nan")
