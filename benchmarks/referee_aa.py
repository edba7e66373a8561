"""A/A stability of the referee's timing on the GPU, beside KernelBench-style events and triton's do_bench.

For each task in benchmarks/aa_tasks/ the candidate is the reference's own code (`class ModelNew(Model)`), so
every speedup should be 1. Runs `--repeats` full evaluations through `kernelsmith.referee.evaluate` (fresh
processes, correctness trials, interleaved timing), then, in this same process and run, repeats two
common timing methods on the same model and inputs:

- KernelBench-style: mean of 100 CUDA-event timings with an L2 flush before each;
- `triton.testing.do_bench` (median).

For each method the "A/A speedup" of repeat i is t(A) / t(A') with A and A' two back-to-back measurements of
the same model. Writes JSON to --out and prints a markdown table.

    python benchmarks/referee_aa.py --out $OUT/aa.json [TASK_STEM ...]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

from kernelsmith.candidate import Candidate  # noqa: E402
from kernelsmith.referee.evaluation import EvalOptions, evaluate  # noqa: E402
from kernelsmith.task import Task, load_module  # noqa: E402

TASKS = ROOT / "benchmarks" / "aa_tasks"


def kernelbench_events(model, inputs, trials: int = 100) -> float:
    """KernelBench's `time_execution_with_cuda_event`, with an L2 flush before each trial: mean ms."""
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(3):
        model(*inputs)
    torch.cuda.synchronize()
    for _ in range(trials):
        flush.zero_()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        model(*inputs)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.mean(times)


def do_bench(model, inputs) -> float:
    return float(triton.testing.do_bench(lambda: model(*inputs), return_mode="median"))


def spread(xs: list[float]) -> float:
    """(max - min) / median, in percent."""
    return 100 * (max(xs) - min(xs)) / statistics.median(xs)


def max_dev(xs: list[float]) -> float:
    return 100 * max(abs(x - 1) for x in xs)


def baselines(module, repeats: int) -> dict:
    """KernelBench-style events and do_bench, `repeats` pairs of back-to-back measurements each."""
    torch.manual_seed(0)
    model = module.Model().cuda()
    inputs = [x.cuda() for x in module.get_inputs()]
    kb, kb_ratio, db, db_ratio = [], [], [], []
    with torch.no_grad():
        for _ in range(repeats):
            a, b = kernelbench_events(model, inputs), kernelbench_events(model, inputs)
            kb.append(a)
            kb_ratio.append(a / b)
            a, b = do_bench(model, inputs), do_bench(model, inputs)
            db.append(a)
            db_ratio.append(a / b)
    del model, inputs
    torch.cuda.empty_cache()
    return {"kernelbench_ms": kb, "kernelbench_spread_pct": spread(kb), "kernelbench_aa_max_dev_pct": max_dev(kb_ratio),
            "do_bench_ms": db, "do_bench_spread_pct": spread(db), "do_bench_aa_max_dev_pct": max_dev(db_ratio)}


def run_task(stem: str, repeats: int, baseline_repeats: int, budget_s: float, save) -> dict:  # noqa: ANN001
    """Baselines first (seconds), then our evaluations; `save(row)` after each, so a run cut short keeps them."""
    path = TASKS / f"{stem}.py"
    task = Task.load(path)
    module = load_module(task.source, str(path), "aa_task")
    row: dict = {"task": stem, **baselines(module, baseline_repeats)}
    save(row)
    cand = Candidate(task.source + "\n\nclass ModelNew(Model):\n    pass\n", "aa")
    opts = EvalOptions(device="cuda", policy="lenient", require_kernel=False, timeout_s=240,
                       timing={"budget_s": budget_s})
    ours, walls = [], []
    for i in range(repeats):
        t0 = time.perf_counter()
        v = evaluate(task, cand, opts)
        walls.append(time.perf_counter() - t0)
        if not v.correct:
            print(f"{stem} repeat {i}: {v.status.value}: {v.error}\n{v.log[-3000:]}", flush=True)
            row.update(error=v.error, status=v.status.value)
            return row
        ours.append(v.speedup)
        row.update({"ref_ms": v.ref_ms, "method": v.timing.get("method"), "eval_wall_s": walls,
                    "phases_s": v.timing.get("phases_s"), "ours_speedups": ours,
                    "ours_max_dev_pct": max_dev(ours), "ours_spread_pct": spread(ours),
                    "ours_within_1pct": all(0.99 <= s <= 1.01 for s in ours)})
        save(row)
        print(f"{stem} #{i}: speedup {v.speedup:.4f} CI {v.speedup_ci} ref {v.ref_ms:.4f} ms "
              f"({v.timing.get('method')}, {v.timing.get('reps')} reps, {walls[-1]:.1f} s) "
              f"{v.timing.get('phases_s')}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="*", default=[p.stem for p in sorted(TASKS.glob("*.py"))])
    ap.add_argument("--repeats", type=int, default=10, help="our evaluations per task")
    ap.add_argument("--baseline-repeats", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=1.0)
    ap.add_argument("--out", type=Path, default=Path("aa.json"))
    args = ap.parse_args()
    env = {"date": str(date.today()), "device": torch.cuda.get_device_name(), "python": platform.python_version(),
           "torch": torch.__version__, "triton": triton.__version__}
    results: list[dict] = []

    def save(row: dict) -> None:
        if not results or results[-1] is not row:
            results.append(row)
        args.out.write_text(json.dumps({"env": env, "results": results}, indent=2))

    for t in args.tasks:
        run_task(t, args.repeats, args.baseline_repeats, args.budget_s, save)
    print(f"\n{env}\n")
    print("| task | ref ms | our method | ours: A/A speedup range (n evals) | ours max dev | ours within ±1% "
          "| KernelBench events spread | KB A/A max dev | do_bench spread | do_bench A/A max dev |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "error" in r:
            print(f"| {r['task']} | failed: {r['error']} |")
            continue
        ours = r.get("ours_speedups") or [float("nan")]
        print(f"| {r['task']} | {r.get('ref_ms', float('nan')):.4f} | {r.get('method')} | {min(ours):.4f}–"
              f"{max(ours):.4f} ({len(ours)}) | {r.get('ours_max_dev_pct', float('nan')):.2f}% | "
              f"{r.get('ours_within_1pct')} | "
              f"{r['kernelbench_spread_pct']:.1f}% | {r['kernelbench_aa_max_dev_pct']:.1f}% | "
              f"{r['do_bench_spread_pct']:.1f}% | {r['do_bench_aa_max_dev_pct']:.1f}% |")


if __name__ == "__main__":
    main()
