"""Wall time per evaluation with the rebuilt referee (sandboxed judge + candidate), and where it goes.

Evaluates each (task, candidate) pair `--n` times in series through `evaluate()` with one spare sandbox per
role kept started (`warm=1`, as the pool, the workshop and the bench do), and prints the first (cold) and the
median later (warm) wall per evaluation, their phases and the sandbox each verdict reports. `--small` adds the
same tasks at 1024 columns (a small candidate, what most of a run evaluates); `--kb` adds KernelBench level 1's
own ReLU, Softmax and RMSNorm files at their own sizes (benchmarks/kb_level1/: 6.4-7.5 GB per tensor), with the
bytes written to disk meanwhile (/proc/diskstats, after a sync).

    python benchmarks/referee_speed.py --device cuda --n 5 --out $OUT/speed.json
    python benchmarks/referee_speed.py --device cpu --n 3        # a CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import os
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
SMALL = [(t, c, {"dim": 1024}) for t, c in PAIRS]
KB = [("benchmarks/kb_level1/19_ReLU.py", "solutions/level1/01_relu.py", {}),
      ("benchmarks/kb_level1/23_Softmax.py", "solutions/level1/05_softmax.py", {}),
      ("benchmarks/kb_level1/36_RMSNorm_.py", "benchmarks/kb_level1/36_RMSNorm_solution.py", {})]


def disk_written() -> int:
    """Bytes written to the block devices so far (whole disks only), after flushing dirty pages."""
    os.sync()
    disks = {p.name for p in Path("/sys/block").iterdir() if not p.name.startswith(("loop", "ram", "zram"))}
    total = 0
    with open("/proc/diskstats") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) > 9 and parts[2] in disks:
                total += int(parts[9]) * 512
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--small", action="store_true", help="also the same tasks at 1024 columns")
    ap.add_argument("--kb", action="store_true", help="also KernelBench's ReLU, Softmax, RMSNorm (one each)")
    ap.add_argument("--kb-n", type=int, default=1)
    ap.add_argument("--only", default="", help="run only the tasks whose file name contains this")
    ap.add_argument("--profile", action="store_true", help="profile the candidate process (KERNELSMITH_PROFILE)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch
    import triton

    rows = []
    plan = ([(t, c, o, args.n) for t, c, o in SMALL] if args.small else []) + [(t, c, {}, args.n) for t, c in PAIRS]
    plan += [(t, c, o, args.kb_n) for t, c, o in KB] if args.kb else []
    plan = [p for p in plan if args.only in Path(p[0]).name]
    if args.profile:
        os.environ["KERNELSMITH_PROFILE"] = "1"
    for task, cand, overrides, n in plan:
        walls, verdicts = [], []
        written = disk_written()
        for _ in range(n):
            t0 = time.perf_counter()
            v = evaluate(ROOT / task, ROOT / cand, EvalOptions(device=args.device, timeout_s=300, warm=1,
                                                               timing={"budget_s": 1.0}), overrides)
            walls.append(time.perf_counter() - t0)
            verdicts.append(v)
            print(f"{Path(task).name:<22} {v.status.value:<10} {walls[-1]:6.2f} s speedup {v.speedup} "
                  f"{v.timing.get('phases_s')} judge {v.timing.get('judge_s')} candidate {v.timing.get('candidate_s')} "
                  f"bound {v.timing.get('wall_bound_ms')} judge {v.timing.get('judge')}", flush=True)
        last = verdicts[-1]
        rows.append({"task": task, "candidate": cand, "overrides": overrides, "n": n,
                     "first_wall_s": round(walls[0], 3),
                     "median_warm_wall_s": round(statistics.median(walls[1:]), 3) if n > 1 else None,
                     "walls_s": [round(w, 3) for w in walls], "statuses": [v.status.value for v in verdicts],
                     "speedups": [v.speedup for v in verdicts], "phases_s": last.timing.get("phases_s"),
                     "judge_s": last.timing.get("judge_s"), "disk_written_mb": round((disk_written() - written) / 2**20, 1),
                     "candidate_s": last.timing.get("candidate_s"), "profile": last.timing.get("candidate_profile"),
                     "sandbox": last.sandbox, "error": last.error[:300]})
    result = {"date": str(date.today()), "device": verdicts[-1].device, "python": platform.python_version(),
              "torch": torch.__version__, "triton": triton.__version__, "rows": rows}
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
