"""RL prompts from evolution runs, in one file that TRL's GRPOTrainer and verl both read.

One row per distinct prompt of the runs (every prompt the engine sent, whether its answer was good or not):

- `prompt`: the chat messages the model saw (system, user) — TRL's conversational prompt, verl's `prompt`;
- TRL reward columns (GRPOTrainer passes every column but `prompt` to each reward function as a keyword
  argument, one list entry per completion): `task_name`, `task_source`, `parent_code`, `parent_speedup`,
  `parent_status`, `eval_options` (JSON: `EvalOptions` fields), `response_mode`;
- verl columns: `data_source` ("kernelsmith/<task>"), `ability`, `reward_model` (`{"style": "rule",
  "ground_truth": JSON}` holding everything the reward needs, so `compute_score` works from it alone) and
  `extra_info` (run, step, level, round, island, prompt hash).

`task_source` is self-contained: the task as the run evaluated it (its `--set` overrides applied, and on
`device="cpu"` its `CPU_OVERRIDES`), with `CPU_OVERRIDES` then emptied so no loader applies them twice. Pass
`device="cuda"` to get a CPU run's prompts with the task's full (GPU) sizes for training on a GPU.
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from kernelsmith.coach.trajectories import CoachError, RunSteps, load_steps
from kernelsmith.settings import check_device
from kernelsmith.task import CPU_OVERRIDES_NAME, Task, TaskError, rewrite_constants

ABILITY = "triton-kernel-optimisation"


def effective_task_source(original: str, overrides: dict[str, Any] | None, device: str, name: str = "task") -> str:
    """The task with its sizes fixed for `device` and `CPU_OVERRIDES` emptied: loading it anywhere gives the same
    sizes."""
    with tempfile.TemporaryDirectory(prefix="ks-task-") as d:
        path = Path(d) / f"{name}.py"
        path.write_text(original)
        task = Task.load(path, overrides or {}, device=device)
    source = task.source
    if CPU_OVERRIDES_NAME in task.constants:
        source = rewrite_constants(source, {CPU_OVERRIDES_NAME: {}})
    return source


def rows_of(run: RunSteps, *, device: str | None = None, timeout_s: float | None = None,
            start_index: int = 0) -> list[dict[str, Any]]:
    cfg = run.config
    dev = device or cfg.get("device") or "cuda"
    if not run.reference:
        raise CoachError(f"{run.run_dir}: the task source is neither readable at {cfg.get('task')!r} nor in the "
                         "prompts")
    user_overrides = cfg.get("overrides") or {}
    try:
        source = effective_task_source(run.reference, user_overrides, dev, run.task_name)
    except TaskError as exc:
        raise CoachError(f"{run.run_dir}: {exc}") from None
    options = {"device": dev, "policy": cfg.get("policy", "strict"),
               "timeout_s": float(timeout_s or cfg.get("eval_timeout_s") or 300.0)}
    mode = cfg.get("response_mode", "full")
    rows = []
    for i, p in enumerate(run.prompts):
        spec = {"task_name": run.task_name, "task_source": source, "parent_code": p.parent_code or "",
                "parent_speedup": p.parent_speedup, "parent_status": p.parent_status or "",
                "eval_options": json.dumps(options), "response_mode": mode}
        step = f"r{p.round}i{p.island}"
        rows.append({
            "data_source": f"kernelsmith/{run.task_name}", "prompt": p.messages, "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": json.dumps(spec)},
            "extra_info": {"index": start_index + i, "split": "train", "run": run.run_dir, "step": step,
                           "parent": p.parent_name or "", "level": run.level, "round": p.round, "island": p.island,
                           "prompt_hash": p.prompt_hash},
            **spec,
        })
    return rows


def build_rl(run_dirs: list[str | Path], out: str | Path, *, device: str | None = None,
             timeout_s: float | None = None, max_per_task: int | None = None) -> dict[str, Any]:
    """Write the RL prompts of the runs to `out` (JSON Lines, de-duplicated by prompt) and a card; returns stats."""
    from kernelsmith.coach.sft import dataset_card, write_jsonl

    try:
        check_device(device)
    except ValueError as exc:
        raise CoachError(str(exc)) from None
    if max_per_task is not None and max_per_task < 1:
        raise CoachError(f"max_per_task {max_per_task}: must be at least 1")
    out = Path(out)
    runs = load_steps(run_dirs)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    per_task: Counter = Counter()
    for run in runs:
        for row in rows_of(run, device=device, timeout_s=timeout_s, start_index=len(rows)):
            key = row["extra_info"]["prompt_hash"]
            if key in seen or (max_per_task is not None and per_task[row["task_name"]] >= max_per_task):
                continue
            seen.add(key)
            per_task[row["task_name"]] += 1
            row["extra_info"]["index"] = len(rows)
            rows.append(row)
    write_jsonl(out, rows)
    stats = {"rows": len(rows), "runs": [r.run_dir for r in runs],
             "per_task": dict(sorted(per_task.items())),
             "per_level": dict(sorted(Counter(r["extra_info"]["level"] for r in rows).items())),
             "devices": sorted({json.loads(r["eval_options"])["device"] for r in rows})}
    out.with_suffix(".md").write_text(dataset_card(out, stats, "rl"))
    return stats
