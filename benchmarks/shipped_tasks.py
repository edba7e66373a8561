"""Evaluate every shipped task's solution through the referee at GPU sizes; print a markdown table.

    python benchmarks/shipped_tasks.py --out $OUT/shipped.json [--budget-s 0.5] [GLOB ...]

Each row is one full `evaluate()` (five correctness trials, hidden test inputs, interleaved timing against
the PyTorch reference), so the speedups are the referee's own, with their 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

from kernelsmith.referee.evaluation import EvalOptions, evaluate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("patterns", nargs="*", default=["level*/*.py"])
    ap.add_argument("--budget-s", type=float, default=0.5)
    ap.add_argument("--out", type=Path, default=Path("shipped.json"))
    args = ap.parse_args()
    tasks = sorted({p for pat in args.patterns for p in (ROOT / "tasks").glob(pat)})
    env = {"date": str(date.today()), "device": torch.cuda.get_device_name(), "python": platform.python_version(),
           "torch": torch.__version__, "triton": triton.__version__}
    opts = EvalOptions(device="cuda", timeout_s=300, timing={"budget_s": args.budget_s})
    rows = []
    for task in tasks:
        rel = task.relative_to(ROOT / "tasks")
        v = evaluate(task, ROOT / "solutions" / rel, opts)
        rows.append({"task": str(rel), **v.to_dict()})
        rows[-1].pop("log")
        args.out.write_text(json.dumps({"env": env, "results": rows}, indent=2))
        print(f"{rel}: {v.status.value} {v.speedup} {v.speedup_ci} {v.error[:200]}", flush=True)
    print(f"\n{env}\n\n| task | status | ref ms | ours ms | speedup (95% CI) | max rel err |\n|---|---|---|---|---|---|")
    for r in rows:
        ci = r["speedup_ci"]
        sp = f"{r['speedup']:.3f} ({ci[0]:.3f}–{ci[1]:.3f})" if r["speedup"] else "—"
        ref = f"{r['ref_ms']:.4f}" if r["ref_ms"] else "—"
        cand = f"{r['cand_ms']:.4f}" if r["cand_ms"] else "—"
        err = f"{r['max_rel_err']:.2e}" if r["max_rel_err"] is not None else "—"
        print(f"| {r['task']} | {r['status']} | {ref} | {cand} | {sp} | {err} |")


if __name__ == "__main__":
    main()
