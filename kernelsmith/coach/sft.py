"""SFT data from evolution runs, selected the way the Kernel-Smith recipe selects it.

Every evolution step (prompt -> response -> child) is a candidate sample: the prompt is the one the model saw,
the target is the response that produced the child. What is kept:

- **a translation step** (PyTorch -> Triton: the child has no parent, or its parent has no Triton kernel) when
  the child is correct;
- **an optimisation step** (Triton -> Triton) when the child is correct and faster than its parent:
  `child speedup / parent speedup >= min_gain` and `> 1`. Both speedups must be measured, so on a CPU run (the
  Triton interpreter measures no time) *only translation steps qualify*; the dataset card says so.

Modes: `all` (every qualifying step), `first` (translation steps only), `best` (in each lineage — the tree
grown from one translation, or from a `--seed-program` — the `top_k` qualifying steps with the highest gain;
a translation's gain is its speedup over PyTorch, and an unmeasured gain ranks last, so a CPU run yields each
lineage's translation).

The leakage guard runs on the qualifying steps before `best` picks (so a leaked step never hides a lineage's
next-best one); then de-duplication, balancing and the cap:

1. **Leakage guard**: a sample is dropped when its prompt already shows the answer — an inspiration with the
   target's normalised digest, or one at least as good as the target (speedup >= the target's when both are
   measured, else the printed score >= the target's score: on CPU a correct inspiration is as good as a correct
   target). Learning to copy a program from the prompt teaches nothing.
2. **De-duplication** by the target program's normalised digest (`Candidate.digest`: formatting and comments
   ignored), across all runs; the highest-gain (then earliest) sample of a digest stays.
3. **Balancing by task difficulty** (`balance=True`): a task's success rate is its qualifying steps over its
   steps. Easy tasks are capped at the median per-task count (their highest-gain samples stay), and every sample
   gets `weight` = 1 / success rate, normalised to a mean of 1 over the file (hard tasks weigh more; TRL's
   SFTTrainer ignores the column, a weighted loss can read it). Without balancing `weight` is 1.
4. **`max_per_task`**: a hard cap per task, keeping the highest-gain samples.

Output: JSON Lines in the chat-messages format TRL's `SFTTrainer` and HF `datasets` read
(`{"messages": [system, user, assistant], ...metadata}`), and a dataset card (`<out stem>.md`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.candidate import Candidate
from kernelsmith.coach.trajectories import TRANSLATE, RunSteps, Step, load_steps

MODES = ("all", "first", "best")
_PRINT_TOL = 5e-4  # prompts print speedups with 3 decimals


@dataclass
class Selection:
    samples: list[dict[str, Any]]
    stats: dict[str, Any] = field(default_factory=dict)


def qualifies(step: Step, min_gain: float) -> str | None:
    """None when the step qualifies, else why not."""
    if not step.correct:
        return "child not correct"
    if step.kind == TRANSLATE:
        return None
    if step.child_speedup is None or step.parent_speedup is None:
        return "later step without measured speedups"
    g = step.gain
    if g is None or g <= 1.0 or g < min_gain:
        return "later step not faster than its parent by min_gain"
    return None


def leaks(step: Step) -> bool:
    """The prompt shows the target, or a program at least as good as the target."""
    target = Candidate(step.child_code).digest
    for s in step.shown:
        if s.digest == target:
            return True
        if step.child_speedup is not None and s.speedup is not None:
            if s.speedup >= step.child_speedup - _PRINT_TOL:
                return True
        elif s.status == "correct" and step.child_score is not None and s.score >= step.child_score - _PRINT_TOL:
            return True
    return False


def _rank(step: Step) -> tuple[int, float, str, int]:
    """Sort key, best first: measured gain before unmeasured, higher gain, then run and insertion order."""
    g = step.gain
    return (0 if g is not None else 1, -(g or 0.0), step.run_dir, step.child_id)


def sample_of(step: Step, mode: str, weight: float = 1.0) -> dict[str, Any]:
    return {
        "messages": [*step.messages, {"role": "assistant", "content": step.response}],
        "task": step.task_name, "level": step.level, "kind": step.kind, "mode": mode,
        "run": step.run_dir, "step": step.name, "parent": step.parent_name, "lineage": step.lineage,
        "round": step.round, "island": step.island, "model": step.model, "device": step.device,
        "status": step.child_status, "speedup": step.child_speedup, "parent_speedup": step.parent_speedup,
        "gain": step.gain, "target_digest": Candidate(step.child_code).digest, "prompt_hash": step.prompt_hash,
        "prompt_verified": step.prompt_verified, "weight": weight,
    }


def select(runs: list[RunSteps], *, mode: str = "all", min_gain: float = 1.0, balance: bool = False,
           max_per_task: int | None = None, top_k: int = 1) -> Selection:
    """Apply the rules of the module docstring; returns the samples and the counts the card reports."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: expected one of {', '.join(MODES)}")
    if not (min_gain >= 1.0 and math.isfinite(min_gain)):
        raise ValueError(f"min_gain {min_gain}: must be a finite ratio >= 1 (a kept later step is faster)")
    if max_per_task is not None and max_per_task < 1:
        raise ValueError(f"max_per_task {max_per_task}: must be at least 1")
    if top_k < 1:
        raise ValueError(f"top_k {top_k}: must be at least 1")
    steps = [s for r in runs for s in r.steps]
    dropped: Counter = Counter()
    per_task_steps: Counter = Counter(s.task_name for s in steps)
    kept: list[Step] = []
    for s in steps:
        why = qualifies(s, min_gain)
        if why is not None:
            dropped[why] += 1
        elif mode == "first" and s.kind != TRANSLATE:
            dropped["mode first: later step"] += 1
        else:
            kept.append(s)
    per_task_qualifying: Counter = Counter(s.task_name for s in kept)
    clean = []
    for s in kept:
        if leaks(s):
            dropped["leakage: prompt shows the target or a program as good"] += 1
        else:
            clean.append(s)
    kept = clean
    if mode == "best":
        lineages: dict[tuple[str, str], list[Step]] = defaultdict(list)
        for s in kept:
            lineages[(s.run_dir, s.lineage)].append(s)
        best = []
        for group in lineages.values():
            group.sort(key=_rank)
            best.extend(group[:top_k])
            if len(group) > top_k:
                dropped["mode best: not among the lineage's top steps"] += len(group) - top_k
        kept = best

    kept.sort(key=_rank)
    unique: dict[str, Step] = {}
    for s in kept:
        d = Candidate(s.child_code).digest
        if d in unique:
            dropped["duplicate target"] += 1
        else:
            unique[d] = s
    chosen = list(unique.values())

    by_task: dict[str, list[Step]] = defaultdict(list)
    for s in chosen:
        by_task[s.task_name].append(s)
    caps: dict[str, int] = {}
    if balance and by_task:
        median = max(1, math.ceil(statistics.median(len(v) for v in by_task.values())))
        caps = {t: median for t in by_task}
    if max_per_task is not None:
        caps = {t: min(caps.get(t, max_per_task), max_per_task) for t in by_task}
    final: list[Step] = []
    for t, group in by_task.items():
        group.sort(key=_rank)
        cap = caps.get(t, len(group))
        final.extend(group[:cap])
        if len(group) > cap:
            dropped["balance / max-per-task cap"] += len(group) - cap

    rate = {t: per_task_qualifying[t] / per_task_steps[t] for t in per_task_steps if per_task_steps[t]}
    weights = {id(s): 1.0 for s in final}
    if balance and final:
        raw = {id(s): 1.0 / max(rate.get(s.task_name, 1.0), 1e-9) for s in final}
        mean = sum(raw.values()) / len(raw)
        weights = {k: v / mean for k, v in raw.items()}
    final.sort(key=lambda s: (s.task_name, s.run_dir, s.child_id))
    samples = [sample_of(s, mode, round(weights[id(s)], 6)) for s in final]

    stats = {
        "mode": mode, "min_gain": min_gain, "balance": balance, "max_per_task": max_per_task, "top_k": top_k,
        "runs": [r.run_dir for r in runs], "steps": len(steps), "samples": len(samples),
        "dropped": dict(dropped),
        "unlinked": {r.run_dir: dict(r.unlinked) for r in runs if r.unlinked},
        "success_rate": {t: round(v, 4) for t, v in sorted(rate.items())},
        "per_task": dict(sorted(Counter(s["task"] for s in samples).items())),
        "per_level": dict(sorted(Counter(s["level"] for s in samples).items())),
        "per_kind": dict(sorted(Counter(s["kind"] for s in samples).items())),
        "devices": sorted({r.config.get("device", "") for r in runs}),
        "unmeasured_runs": [r.run_dir for r in runs if not any(s.child_speedup is not None for s in r.steps)],
        "unverified_prompts": sum(1 for s in samples if not s["prompt_verified"]),
    }
    return Selection(samples, stats)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _table(title: str, counts: dict[str, Any]) -> str:
    if not counts:
        return f"### {title}\n\n(none)\n"
    lines = [f"### {title}", "", "| | samples |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in counts.items()]
    return "\n".join(lines) + "\n"


def dataset_card(out: Path, stats: dict[str, Any], kind: str = "sft") -> str:
    """A README-style card (YAML header as HF datasets reads it) for the file at `out`."""
    head = (f"---\nconfigs:\n- config_name: default\n  data_files:\n  - split: train\n    path: {out.name}\n"
            f"tags:\n- kernelsmith\n- triton\n- {kind}\n---\n\n")
    lines = [f"# kernelsmith {kind.upper()} data: `{out.name}`", ""]
    if kind == "sft":
        lines += [
            f"{stats['samples']} samples from {stats['steps']} evolution steps of {len(stats['runs'])} run(s), "
            f"mode `{stats['mode']}`, min gain {stats['min_gain']}, balance {stats['balance']}, "
            f"max per task {stats['max_per_task']}.",
            "",
            "Each line: `messages` = the system and user prompt the model saw for one step and, as the assistant "
            "turn, the response that produced the child; metadata `task`, `level`, `kind` (`translate`: "
            "PyTorch→Triton; `optimise`: Triton→Triton), `speedup`, `parent_speedup`, `gain`, `weight`, "
            "`target_digest`, `run`, `step`.",
            "",
            "Rules: a translation step is kept when its child is correct; a later step when its child is correct "
            "and faster than its parent by the min gain (both speedups measured). Samples whose prompt shows the "
            "target or an equally good program are dropped (leakage), and targets are de-duplicated by normalised "
            "digest.",
            "",
        ]
        if stats["unmeasured_runs"]:
            lines += [
                "**Correctness-only data.** These runs measured no speedups (CPU runs: the Triton interpreter is "
                "not timed): " + ", ".join(f"`{r}`" for r in stats["unmeasured_runs"]) + ". From them only "
                "translation (first) steps qualify; their `speedup` and `gain` are null. Rerun on a GPU for "
                "optimisation steps.",
                "",
            ]
        lines += [_table("Per task", stats["per_task"]), _table("Per level", stats["per_level"]),
                  _table("Per kind", stats["per_kind"]), _table("Dropped (why)", stats["dropped"])]
        lines += ["### Task success rates (qualifying steps / steps)", ""]
        lines += [f"- {t}: {r:.3f}" for t, r in stats["success_rate"].items()] + [""]
    else:
        lines += [
            f"{stats['rows']} RL prompts from {len(stats['runs'])} run(s), for TRL's GRPOTrainer (`prompt` as chat "
            "messages, extra columns reach the reward as keyword arguments) and verl (`data_source`, `prompt`, "
            "`reward_model.ground_truth`, `extra_info`). Reward: `kernelsmith.coach.reward.KernelReward` / "
            "`compute_score`.",
            "",
            f"Evaluation device recorded in the rows: {', '.join(stats['devices'])}.",
            "",
            _table("Per task", stats["per_task"]), _table("Per level", stats["per_level"]),
        ]
    if stats.get("unlinked"):
        lines += ["### Steps that could not be recovered from the run store", ""]
        for run, reasons in stats["unlinked"].items():
            lines += [f"- `{run}`: " + ", ".join(f"{n} × {why}" for why, n in reasons.items())]
        lines.append("")
    return head + "\n".join(lines)


def build_sft(run_dirs: list[str | Path], out: str | Path, **kwargs: Any) -> Selection:
    """Select, write `out` (JSON Lines) and its card `<stem>.md`; returns the selection."""
    out = Path(out)
    runs = load_steps(run_dirs)
    sel = select(runs, **kwargs)
    write_jsonl(out, sel.samples)
    out.with_suffix(".md").write_text(dataset_card(out, sel.stats, "sft"))
    return sel
