"""The offline proposer on the GPU, beside torch.compile: seed, tune, confirm through the referee.

For each shipped task at its GPU sizes, in one process and one run, all at one fp32 precision setting
(`--precision`, the referee's: ieee | tf32x3 | tf32, default tf32x3; see `kernelsmith.referee.worker.set_precision`):

1. PyTorch eager, `torch.compile` (default) and `torch.compile(mode="max-autotune")` are timed with
   `triton.testing.do_bench` (median, L2 cleared between calls), compile time reported apart, at that setting
   (ieee and tf32x3: cuBLAS and cuDNN in full fp32; tf32: `allow_tf32 = True`); eager and `torch.compile` are
   also timed with TF32 allowed (one tf32 pass), the speed the compiler's fp32 dots are up against when
   accuracy matters less;
2. the offline seed (`kernelsmith.compiler.generate_seed`, its fp32 dots at that precision) is generated and
   timed the same way;
3. the AST tuner (`kernelsmith.workshop.offline.mutate`) runs a coordinate descent over the seed's knobs
   (every allowed value of one knob at a time, at most `--variants` programs per task), each variant first
   checked for correctness against eager on a fresh input (the referee's tolerances), then timed;
4. the best program is evaluated once through the full referee (`evaluate()`: fresh processes, five
   correctness trials, hidden inputs, interleaved timing against the reference): that speedup, with its
   95% interval, is the one we report as ours. The do_bench numbers put all five side by side.

The screen in step 3 runs our own generated code in this process; that is a benchmark shortcut for the
tuner's search, not the product's path (`kernelsmith evolve` sends every variant through the referee).

    python benchmarks/offline_vs_compile.py --out $OUT/offline.json [GLOB ...] [--variants 10] [--precision tf32x3]

Every column is labelled with the precision it ran at, e.g. `torch.compile [tf32x3]` and `torch.compile [tf32]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
if "--device=cpu" in sys.argv or " ".join(sys.argv).count("--device cpu"):
    os.environ["TRITON_INTERPRET"] = "1"  # the smoke test: must precede triton's import

import torch  # noqa: E402
import triton  # noqa: E402
import triton.testing  # noqa: E402

from kernelsmith.candidate import Candidate  # noqa: E402
from kernelsmith.compiler import SeedUnsupported, generate_seed  # noqa: E402
from kernelsmith.referee.compare import compare_outputs  # noqa: E402
from kernelsmith.referee.evaluation import EvalOptions, evaluate  # noqa: E402
from kernelsmith.referee.worker import set_precision  # noqa: E402
from kernelsmith.settings import PRECISIONS  # noqa: E402
from kernelsmith.task import Task, load_module  # noqa: E402
from kernelsmith.workshop.offline.mutate import knobs, set_knobs  # noqa: E402

_loaded = 0
DEVICE = "cuda"  # `--device cpu` is a smoke test of this script (interpreter, tiny sizes, wall-clock medians)


def build(module, cls: str, task_module=None):  # noqa: ANN001, ANN201
    """As KernelBench and the referee do: the same seed before the init inputs and before the constructor."""
    torch.manual_seed(42)
    init = list((task_module or module).get_init_inputs())
    torch.manual_seed(42)
    return getattr(module, cls)(*init).to(DEVICE).eval()


def inputs_for(module, seed: int) -> list:  # noqa: ANN001
    torch.manual_seed(seed)
    with torch.device(DEVICE):
        return [x.to(DEVICE) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]


def outs(x) -> list[torch.Tensor]:  # noqa: ANN001
    return list(x) if isinstance(x, (tuple, list)) else [x]


def bench(fn, inputs: list, rep_ms: int = 100) -> float:  # noqa: ANN001
    with torch.no_grad():
        if DEVICE == "cpu":
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn(*inputs)
                times.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(times)
        return float(triton.testing.do_bench(lambda: fn(*inputs), warmup=25, rep=rep_ms, return_mode="median"))


def load_program(source: str, workdir: Path):  # noqa: ANN201
    """Triton reads kernel source through the file, so each variant gets one."""
    global _loaded
    _loaded += 1
    path = workdir / f"variant_{_loaded}.py"
    path.write_text(source)
    return load_module(source, str(path), f"offline_variant_{_loaded}")


def screen(source: str, module, reference, workdir: Path) -> tuple[float | None, str]:  # noqa: ANN001
    """do_bench time of a correct program, or (None, why not)."""
    try:
        cand = build(load_program(source, workdir), "ModelNew", module)
        x = inputs_for(module, 1234)
        with torch.no_grad():
            cmp = compare_outputs(outs(cand(*x)), outs(reference(*x)))
        if not cmp.ok:
            return None, f"incorrect: {cmp.reason}"
        return bench(cand, inputs_for(module, 0)), ""
    except Exception as exc:  # noqa: BLE001 - a variant that fails to compile is skipped, with its reason
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"


def tune(seed_src: str, seed_ms: float, module, reference, workdir: Path, budget: int) -> tuple[str, float, list]:  # noqa: ANN001
    """Coordinate descent over the knobs: each knob's every allowed value, keeping the fastest correct one."""
    best_src, best_ms, tried, log = seed_src, seed_ms, 0, []
    for knob in knobs(seed_src):
        current = {k.name: k for k in knobs(best_src)}.get(knob.name)
        if current is None:
            continue
        for value in current.allowed:
            if value == current.value or tried >= budget:
                continue
            if current.kind == "block" and not (current.value / 4 <= value <= current.value * 4):
                continue  # stay within 4x of the seed's choice: far-off tiles rarely win and cost compiles
            src = set_knobs(best_src, {current.name: value})
            tried += 1
            ms, why = screen(src, module, reference, workdir)
            log.append({"knob": current.name, "value": value, "ms": ms, "error": why})
            if ms is not None and ms < best_ms * 0.99:
                best_src, best_ms = src, ms
                current = {k.name: k for k in knobs(best_src)}[knob.name]
    return best_src, best_ms, log


def compiled_time(model, inputs: list, mode: str | None) -> tuple[float | None, float, str]:  # noqa: ANN001
    torch._dynamo.reset()
    try:
        fn = torch.compile(model, mode=mode) if mode else torch.compile(model)
        t0 = time.perf_counter()
        with torch.no_grad():
            fn(*inputs)
            fn(*inputs)
        return bench(fn, inputs), time.perf_counter() - t0, ""
    except Exception as exc:  # noqa: BLE001
        return None, 0.0, f"{type(exc).__name__}: {str(exc)[:300]}"


def run_task(path: Path, args: argparse.Namespace, workdir: Path) -> dict:
    rel = str(path.relative_to(ROOT / "tasks"))
    task = Task.load(path, device=DEVICE)
    module = load_module(task.source, str(path), "offline_task_" + path.stem)
    reference = build(module, "Model")
    x = inputs_for(module, 0)
    set_precision(args.precision)
    row: dict = {"task": rel, "precision": args.precision, "eager_ms": bench(reference, x)}
    if not args.skip_compile:
        for key, mode in (("compile", None), ("max_autotune", "max-autotune")):
            ms, secs, err = compiled_time(reference, x, mode)
            row.update({f"{key}_ms": ms, f"{key}_compile_s": round(secs, 1), f"{key}_error": err})
    if args.precision != "tf32":  # the same baselines with TF32 allowed: one tf32 pass per fp32 dot
        set_precision("tf32")
        row["eager_tf32_ms"] = bench(reference, x)
        if not args.skip_compile:
            ms, secs, err = compiled_time(reference, x, None)
            row.update({"compile_tf32_ms": ms, "compile_tf32_compile_s": round(secs, 1), "compile_tf32_error": err})
        set_precision(args.precision)
    else:
        row["eager_tf32_ms"], row["compile_tf32_ms"] = row["eager_ms"], row.get("compile_ms")
    torch._dynamo.reset()
    try:
        seed = generate_seed(task.source, filename=str(path), precision=args.precision)
    except SeedUnsupported as exc:
        row["seed_error"] = str(exc)
        return row
    row["patterns"] = seed.patterns
    seed_ms, why = screen(seed.source, module, reference, workdir)
    row.update(seed_ms=seed_ms, seed_screen_error=why)
    if seed_ms is None:
        best_src, best_ms, log = seed.source, None, []
    else:
        best_src, best_ms, log = tune(seed.source, seed_ms, module, reference, workdir, args.variants)
    row.update(tuned_ms=best_ms, tuning=log, tuned_source=best_src)
    del reference, x
    if DEVICE == "cuda":
        torch.cuda.empty_cache()
    v = evaluate(task, Candidate(best_src, "tuned"), EvalOptions(device=DEVICE, timeout_s=300, precision=args.precision,
                                                                    timing={"budget_s": args.budget_s}))
    row.update(status=v.status.value, speedup=v.speedup, speedup_ci=v.speedup_ci, ref_ms=v.ref_ms,
               cand_ms=v.cand_ms, max_rel_err=v.max_rel_err, error=v.error[:500],
               guards=[g.name for g in v.guards], eval_phases_s=v.timing.get("phases_s"))
    return row


def geomean(xs: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def fmt_geo(x: float | None) -> str:
    return f"{x:.2f}×" if x else "—"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}×" if a and b else "—"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("patterns", nargs="*", default=["level*/*.py"])
    ap.add_argument("--variants", type=int, default=10, help="tuner variants screened per task")
    ap.add_argument("--budget-s", type=float, default=0.5, help="the referee's timing budget")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--precision", choices=list(PRECISIONS), default="tf32x3",
                    help="fp32 dots of the seed and of the eager/torch.compile baselines (the referee's setting)")
    ap.add_argument("--out", type=Path, default=Path("offline.json"))
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cpu":
        args.skip_compile = True
    tasks = list(dict.fromkeys(p for pat in args.patterns for p in sorted((ROOT / "tasks").glob(pat))))
    env = {"date": str(date.today()), "device": torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", "python": platform.python_version(),
           "torch": torch.__version__, "triton": triton.__version__, "precision": args.precision,
           "precision_means": PRECISIONS[args.precision]}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in tasks:
            t0 = time.perf_counter()
            try:
                row = run_task(path, args, Path(tmp))
            except Exception as exc:  # noqa: BLE001 - one broken task must not lose the others' numbers
                row = {"task": str(path.relative_to(ROOT / "tasks")), "crash": traceback.format_exc()[-2000:]}
                print(f"{path.name}: {exc}", flush=True)
            row["wall_s"] = round(time.perf_counter() - t0, 1)
            rows.append(row)
            args.out.write_text(json.dumps({"env": env, "results": rows}, indent=2))
            print(f"{row['task']}: {row.get('status')} {row.get('speedup')} {row.get('speedup_ci')} "
                  f"({row['wall_s']} s) {row.get('error', '')[:200]}", flush=True)
    p = args.precision
    print(f"\n{env}\n")
    print(f"Speedups over eager [{p}] ({PRECISIONS[p]}); [tf32]: TF32 allowed, one tf32 pass per fp32 dot.\n")
    print(f"| task | eager [{p}] ms | torch.compile [{p}] | max-autotune [{p}] | eager [tf32] | torch.compile [tf32] "
          f"| seed [{p}] (do_bench) | tuned [{p}] (do_bench) | referee speedup [{p}] (95% CI) | status |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        e = r.get("eager_ms")
        sp = (f"{r['speedup']:.2f}× ({r['speedup_ci'][0]:.2f}–{r['speedup_ci'][1]:.2f})"
              if r.get("speedup") else "—")
        print(f"| {r['task']} | {e:.4f} | {ratio(e, r.get('compile_ms'))} | {ratio(e, r.get('max_autotune_ms'))} "
              f"| {ratio(e, r.get('eager_tf32_ms'))} | {ratio(e, r.get('compile_tf32_ms'))} "
              f"| {ratio(e, r.get('seed_ms'))} | {ratio(e, r.get('tuned_ms'))} | {sp} "
              f"| {r.get('status', r.get('seed_error', 'crash'))[:60]} |" if e else f"| {r['task']} | crash |")
    for level in ("level1", "level2", "level3"):
        mine = [r for r in rows if r["task"].startswith(level) and r.get("eager_ms")]
        ok = [r["speedup"] for r in mine if r.get("status") == "correct" and r.get("speedup")]
        line = f"{level}: geomean referee speedup [{p}] {fmt_geo(geomean(ok))} over {len(ok)} correct tasks"
        for key, label in (("compile_ms", f"torch.compile [{p}]"), ("eager_tf32_ms", "eager [tf32]"),
                           ("compile_tf32_ms", "torch.compile [tf32]")):
            xs = [r["eager_ms"] / r[key] for r in mine if r.get(key)]
            line += f"; {label} {fmt_geo(geomean(xs))} over {len(xs)}"
        print(line)


if __name__ == "__main__":
    main()
