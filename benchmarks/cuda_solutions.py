"""Evaluate the shipped CUDA C++ solutions (`solutions_cuda/`, mirrored by path) on the GPU; print a table.

    python benchmarks/cuda_solutions.py --out $OUT/cuda.json [--budget-s 0.5] [GLOB ...]

Each row is one full `evaluate(..., backend="cuda")`: build (nvcc, cached by source digest in --cache), five
correctness trials, hidden test inputs, interleaved timing against PyTorch. Each solution is evaluated twice:
the second run's build must come from the cache (its `build_s` should be ~0).
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

from kernelsmith.referee.evaluation import EvalOptions, evaluate  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("patterns", nargs="*", default=["level*/*.py"])
    ap.add_argument("--budget-s", type=float, default=0.5)
    ap.add_argument("--cache", type=Path, default=None, help="build cache dir (default: ~/.cache/kernelsmith/...)")
    ap.add_argument("--out", type=Path, default=Path("cuda_solutions.json"))
    args = ap.parse_args()
    solutions = sorted({p for pat in args.patterns for p in (ROOT / "solutions_cuda").glob(pat)})
    env = {"date": str(date.today()), "device": torch.cuda.get_device_name(), "python": platform.python_version(),
           "torch": torch.__version__, "cuda": torch.version.cuda}
    opts = EvalOptions(device="cuda", backend="cuda", timeout_s=600, timing={"budget_s": args.budget_s},
                       build_cache_dir=str(args.cache) if args.cache else None)
    rows = []
    for sol in solutions:
        rel = sol.relative_to(ROOT / "solutions_cuda")
        for attempt in ("first", "cached"):
            v = evaluate(ROOT / "tasks" / rel, sol, opts)
            build = v.timing.get("build", {})
            rows.append({"task": str(rel), "attempt": attempt, "status": v.status.value, "speedup": v.speedup,
                         "speedup_ci": v.speedup_ci, "ref_ms": v.ref_ms, "cand_ms": v.cand_ms,
                         "kernels": v.kernels, "build_s": build.get("seconds"), "build_cached": build.get("cached"),
                         "error": v.error[:500], "guards": [g.to_dict() for g in v.guards],
                         "phases_s": v.timing.get("phases_s")})
            print(json.dumps(rows[-1]), flush=True)
    args.out.write_text(json.dumps({"env": env, "rows": rows}, indent=2))
    print("\n| task | attempt | status | speedup (95% CI) | cand ms | build s (cached) |\n|---|---|---|---|---|---|")
    for r in rows:
        ci = f" ({r['speedup_ci'][0]:.2f}–{r['speedup_ci'][1]:.2f})" if r["speedup_ci"] else ""
        sp = f"{r['speedup']:.3f}×{ci}" if r["speedup"] is not None else "—"
        print(f"| {r['task']} | {r['attempt']} | {r['status']} | {sp} | {r['cand_ms']} | {r['build_s']} "
              f"({r['build_cached']}) |")


if __name__ == "__main__":
    main()
