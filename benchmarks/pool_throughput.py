"""Evaluations per minute: the worker pool against one fresh `kernelsmith eval` process per candidate, in series.

A mixed batch (default 100) cycles through the shipped tasks with: the shipped solution (correct), a
constant-output candidate (incorrect), one with a syntax error (compile_error), one that raises in forward
(runtime_error), one that kills its own process (crashed) and one that never returns (timeout, after
`--timeout` seconds). Both ways evaluate the same batch in this one run, the serial way first (`--no-serial`
skips it):

- serial: `kernelsmith eval TASK CAND --json` in a new process per candidate, one after another (how
  KernelBench's scripts evaluate);
- pool: `LocalPool.evaluate_many` with `--slots` evaluations in flight per GPU, timing under the GPU's lease.

Prints both rates, and for every correct candidate the two speedups with their 95% intervals and whether the
intervals overlap (the pool must not change what is measured).

    python benchmarks/pool_throughput.py --n 100 --slots 4 --out $OUT/pool.json
    python benchmarks/pool_throughput.py --device cpu --n 6 --slots 2        # a smoke test on the CPU
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelsmith.referee.pool import LocalPool  # noqa: E402

WRONG = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *xs):
        return torch.zeros_like(xs[0])
'''
BROKEN = "class ModelNew(:\n    pass\n"
RAISES = '''import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *xs):
        raise RuntimeError("this candidate fails in forward")
'''


CRASHES = '''import os
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *xs):
        os.abort()
'''
HANGS = '''import time
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *xs):
        while True:
            time.sleep(1)
'''
SOURCES = {"wrong": WRONG, "broken": BROKEN, "raises": RAISES, "crashes": CRASHES, "hangs": HANGS}
KINDS = ["solution", "wrong", "solution", "broken", "solution", "raises", "solution", "crashes", "solution", "hangs"]


def batch(n: int, pattern: str, kinds: list[str]) -> list[tuple[Path, str, str]]:
    """(task, candidate source, kind) for n candidates, cycling tasks and kinds."""
    tasks = sorted((ROOT / "tasks").glob(pattern))
    out = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        kind = kinds[i % len(kinds)]
        source = ((ROOT / "solutions" / task.relative_to(ROOT / "tasks")).read_text() if kind == "solution"
                  else SOURCES[kind])
        out.append((task, source, kind))
    return out


def serial(items: list[tuple[Path, str, str]], device: str, tmp: Path, timeout: float) -> tuple[float, list[dict]]:
    verdicts, t0 = [], time.perf_counter()
    for i, (task, source, _) in enumerate(items):
        cand = tmp / f"cand_{i}.py"
        cand.write_text(source)
        proc = subprocess.run([sys.executable, "-c", "from kernelsmith.cli import app; app()", "eval", str(task), str(cand), "--device",
                               device, "--timeout", str(timeout), "--json"], capture_output=True, text=True, cwd=ROOT)
        verdicts.append(json.loads(proc.stdout) if proc.stdout.strip() else {"status": "no output",
                                                                              "error": proc.stderr[-500:]})
    return time.perf_counter() - t0, verdicts


def pooled(items: list[tuple[Path, str, str]], device: str, slots: int, timeout: float,
           warm: bool = True) -> tuple[float, list[dict], float]:
    """The batch through one pool, `capacity` in flight; one line per verdict as it lands (a cut-off run still says
    where it was). `warm`: the pool's sandbox template is started before the clock starts (a running service or
    run has it already); its start-up time is returned separately."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    pool = LocalPool(device, slots_per_gpu=slots, cpu_slots=slots)
    warm_s = pool.warm_up() if warm else 0.0
    print(f"warm-up (the sandbox template): {warm_s:.1f} s", flush=True)
    requests = [{"task_source": task.read_text(), "task_name": task.name, "candidate_source": source,
                 "options": {"device": device, "timeout_s": timeout}} for task, source, _ in items]
    verdicts: list[dict] = [{} for _ in items]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, pool.capacity)) as ex:
        futures = {ex.submit(pool.run, r): i for i, r in enumerate(requests)}
        for fut in as_completed(futures):
            i = futures[fut]
            verdicts[i] = v = fut.result()
            print(f"{time.perf_counter() - t0:7.1f} s  #{i:<3} {items[i][0].name:<24} {items[i][2]:<9} "
                  f"{v.get('status'):<14} {v.get('elapsed_s')} s {v.get('timing', {})}", flush=True)
    return time.perf_counter() - t0, verdicts, warm_s


def main() -> None:
    import tempfile

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--slots", type=int, default=4, help="evaluations in flight per GPU")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--tasks", default="level*/*.py", help="glob under tasks/")
    ap.add_argument("--out", type=Path, default=Path("pool.json"))
    ap.add_argument("--timeout", type=float, default=60.0, help="each evaluation's time limit (the hanging one's)")
    ap.add_argument("--kinds", default=",".join(KINDS), help="the cycle of candidate kinds")
    ap.add_argument("--no-serial", action="store_true", help="the pool only")
    ap.add_argument("--cold", action="store_true", help="start the clock before the sandbox template is started")
    args = ap.parse_args()
    import faulthandler
    import signal

    faulthandler.register(signal.SIGTERM, all_threads=True)  # `timeout` on a stuck run shows where each thread is
    import torch
    import triton

    items = batch(args.n, args.tasks, args.kinds.split(","))
    serial_s, serial_v = float("nan"), [{} for _ in items]
    if not args.no_serial:
        with tempfile.TemporaryDirectory() as tmp:
            serial_s, serial_v = serial(items, args.device, Path(tmp), args.timeout)
        args.out.write_text(json.dumps({"serial_s": serial_s, "serial": serial_v}))  # kept if the pool is cut off
        print(f"serial: {args.n} in {serial_s:.1f} s", flush=True)
    pool_s, pool_v, warm_s = pooled(items, args.device, args.slots, args.timeout, warm=not args.cold)
    rows = []
    for (task, _, kind), a, b in zip(items, serial_v, pool_v):
        overlap = None
        if a.get("speedup_ci") and b.get("speedup_ci"):
            overlap = a["speedup_ci"][0] <= b["speedup_ci"][1] and b["speedup_ci"][0] <= a["speedup_ci"][1]
        rows.append({"task": task.name, "kind": kind, "serial": a.get("status"), "pool": b.get("status"),
                     "serial_speedup": a.get("speedup"), "serial_ci": a.get("speedup_ci"),
                     "pool_speedup": b.get("speedup"), "pool_ci": b.get("speedup_ci"), "ci_overlap": overlap})
    result = {
        "env": {"date": str(date.today()), "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                "python": platform.python_version(), "torch": torch.__version__, "triton": triton.__version__},
        "n": args.n, "slots": args.slots, "timeout_s": args.timeout,
        "pool_statuses": {st: sum(r["pool"] == st for r in rows) for st in sorted({str(r["pool"]) for r in rows})},
        "pool_elapsed_s": sorted(v.get("elapsed_s") or 0 for v in pool_v),
        "serial_s": serial_s, "pool_s": pool_s, "warm_up_s": warm_s,
        "serial_per_min": 60 * args.n / serial_s, "pool_per_min": 60 * args.n / pool_s,
        "same_status": sum(r["serial"] == r["pool"] for r in rows),
        "ci_overlap": sum(bool(r["ci_overlap"]) for r in rows),
        "timed": sum(r["ci_overlap"] is not None for r in rows), "rows": rows,
    }
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=2))
    for r in rows:
        if r["ci_overlap"] is False:
            print(f"intervals disagree: {r}")


if __name__ == "__main__":
    main()
