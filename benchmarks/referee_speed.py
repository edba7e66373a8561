"""Wall time per evaluation with the rebuilt referee (sandboxed judge + candidate), and where it goes.

Evaluates each (task, candidate) pair `--n` times in series through `evaluate()` with one spare sandbox per
role kept started (`warm=1`, as the pool, the workshop and the bench do), and prints the first (cold) and the
median later (warm) wall per evaluation, their phases and the sandbox each verdict reports. On a GPU the shipped level-1
tasks are small; `--kb` adds KernelBench-size ReLU, Softmax and RMSNorm (benchmarks/kb_level1/).

    python benchmarks/referee_speed.py --device cuda --n 5 --out $OUT/speed.json
    python benchmarks/referee_speed.py --device cpu --n 3        # a CPU smoke test
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

from kernelsmith.referee.evaluation import EvalOptions, evaluate  # noqa: E402

PAIRS = [("tasks/level1/01_relu.py", "solutions/level1/01_relu.py"),
         ("tasks/level1/05_softmax.py", "solutions/level1/05_softmax.py")]
# KernelBench level 1's own sizes for ReLU and Softmax (4096 × 393216 fp32: 6.4 GB per tensor).
KB = [("tasks/level1/01_relu.py", "solutions/level1/01_relu.py", {"dim": 393216}),
      ("tasks/level1/05_softmax.py", "solutions/level1/05_softmax.py", {"dim": 393216})]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--kb", action="store_true", help="also KernelBench-size ReLU and Softmax (one each)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch
    import triton

    rows = []
    plan = [(t, c, {}, args.n) for t, c in PAIRS] + ([(t, c, o, 1) for t, c, o in KB] if args.kb else [])
    for task, cand, overrides, n in plan:
        walls, verdicts = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            v = evaluate(ROOT / task, ROOT / cand, EvalOptions(device=args.device, timeout_s=300, warm=1,
                                                               timing={"budget_s": 1.0}), overrides)
            walls.append(time.perf_counter() - t0)
            verdicts.append(v)
            print(f"{Path(task).name:<22} {v.status.value:<10} {walls[-1]:6.2f} s speedup {v.speedup} "
                  f"{v.timing.get('phases_s')} judge {v.timing.get('judge_s')} bound {v.timing.get('wall_bound_ms')}", flush=True)
        last = verdicts[-1]
        rows.append({"task": task, "candidate": cand, "overrides": overrides, "n": n,
                     "first_wall_s": round(walls[0], 3),
                     "median_warm_wall_s": round(statistics.median(walls[1:]), 3) if n > 1 else None,
                     "walls_s": [round(w, 3) for w in walls], "statuses": [v.status.value for v in verdicts],
                     "speedups": [v.speedup for v in verdicts], "phases_s": last.timing.get("phases_s"),
                     "judge_s": last.timing.get("judge_s"),
                     "sandbox": last.sandbox, "error": last.error[:300]})
    result = {"date": str(date.today()), "device": verdicts[-1].device, "python": platform.python_version(),
              "torch": torch.__version__, "triton": triton.__version__, "rows": rows}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
