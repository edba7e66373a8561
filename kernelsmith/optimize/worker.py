"""The sandboxed side of `kernelsmith optimize`: `python -m kernelsmith.optimize.worker DIR`.

Reads DIR/job.json (the model's source with overrides applied, `optimized.py`'s text with every part to try
switched on, the device) and writes DIR/result.json. Runs only inside a referee sandbox (`sandbox.run_job`):
the model's code and the winners' code execute here.

1. Build `Model` and `ModelNew` the way the referee builds a task and a candidate (same seed before each).
2. For each part, switched on alone: did it build (bound to the model's tensors), and does the model's output
   still match (the referee's tolerances)? Then together: those that match are kept in rank order while the
   model's output still matches with all of them on.
3. Time each part's block the way extract times the model's nodes (synchronised around each call, median of
   runs): with the parts that matched switched on (after) and all off (before, the model's original ops), and
   the whole `Model` and `ModelNew`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

MAX_REPS, MIN_REPS, BUDGET_S = 25, 3, 20.0


def run(job: dict[str, Any], work: Path) -> dict[str, Any]:
    import torch

    from kernelsmith.extract.worker import SEED, ModelFailure, _build, _flat, _median_ms, _seed_all, _sync
    from kernelsmith.referee.compare import compare_outputs
    from kernelsmith.referee.worker import init_inputs
    from kernelsmith.task import load_module

    device = job["device"]
    torch.set_grad_enabled(False)
    try:
        model_mod = load_module(job["source"], job["filename"], "kernelsmith_optimize_model")
    except BaseException as exc:  # noqa: BLE001 - the model's own failure
        raise ModelFailure(f"the model file raised: {type(exc).__name__}: {exc}") from None
    path = work / "optimized.py"  # a real file: Triton reads a kernel's source from its module's file
    path.write_text(job["optimized"])
    new_mod = load_module(job["optimized"], str(path), "kernelsmith_optimized")
    model, inputs = _build(model_mod, device)
    init = init_inputs(model_mod, SEED, device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _seed_all(SEED)
        new = new_mod.ModelNew(*init).to(device)
    built = list(new._ks_parts)
    notes = [str(w.message) for w in caught]
    _seed_all(SEED)
    expected = [t.detach().clone() for t in _flat(model(*inputs))]
    parts: dict[str, Any] = {}
    good: list[int] = []
    for k in job["parts"]:
        entry: dict[str, Any] = {"built": built[k] is not None}
        if built[k] is None:
            entry["reason"] = next((n for n in notes if f"part {k} " in n), "it was not built")[:400]
            parts[str(k)] = entry
            continue
        new.__dict__["_ks_parts"] = [p if i == k else None for i, p in enumerate(built)]
        try:
            _seed_all(SEED)
            got = [t.detach() for t in _flat(new(*inputs))]
            cmp = compare_outputs(got, expected)
            entry.update(ok=cmp.ok, max_abs_err=cmp.max_abs_err if cmp.max_abs_err == cmp.max_abs_err else None,
                         reason=cmp.reason)
        except BaseException as exc:  # noqa: BLE001 - the part's program failed in the model: its reason
            entry.update(ok=False, reason=f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        if entry.get("ok"):
            good.append(k)
        parts[str(k)] = entry
    together: list[int] = []  # parts that pass alone, kept in rank order while the model still matches with all
    for k in good:
        new.__dict__["_ks_parts"] = [p if i in (*together, k) else None for i, p in enumerate(built)]
        try:
            _seed_all(SEED)
            ok = compare_outputs([t.detach() for t in _flat(new(*inputs))], expected).ok
        except BaseException as exc:  # noqa: BLE001 - as above
            ok, parts[str(k)]["reason"] = False, f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        if ok:
            together.append(k)
        else:
            parts[str(k)].update(ok=False, reason=parts[str(k)].get("reason") or
                                 "matches alone, not together with the parts ranked above it")
    good = together

    # Repetitions from the slower of the model and the model with the parts swapped in: on the CPU the parts
    # run in Triton's interpreter, often far slower than the eager model, and a count set by the eager time
    # alone ran a ResNet block's interpreted convolutions past the worker's time limit.
    swapped = [p if i in good else None for i, p in enumerate(built)]
    slowest = 0.0
    for parts_on in ([None] * len(built), swapped):
        new.__dict__["_ks_parts"] = parts_on
        one = time.perf_counter()
        new(*inputs)
        _sync(device)
        slowest = max(slowest, time.perf_counter() - one)
    reps = int(max(MIN_REPS, min(MAX_REPS, BUDGET_S * 1e3 / 4 / max(slowest * 1e3, 1e-3))))
    times: dict[int, list[float]] = {}

    def timed(k: int, original: Any, args: Any, consts: Any) -> Any:
        _sync(device)
        t0 = time.perf_counter()
        part = new._ks_parts[k]
        out = original(*args, *consts) if part is None else part(*args)
        _sync(device)
        times.setdefault(k, []).append((time.perf_counter() - t0) * 1e3)
        return out

    result: dict[str, Any] = {"ok": True, "reps": reps, "device": device, "swapped": good}
    new.__dict__["_ks_parts"] = [None] * len(built)
    result["model_ms"] = round(_median_ms(lambda: model(*inputs), reps, device), 4)
    new.__dict__["_ks_call"] = timed
    for state, parts_on in (("before", [None] * len(built)), ("after", swapped)):
        new.__dict__["_ks_parts"] = parts_on
        times.clear()
        whole = []
        for _ in range(reps):
            _sync(device)
            t0 = time.perf_counter()
            new(*inputs)
            _sync(device)
            whole.append((time.perf_counter() - t0) * 1e3)
        total = statistics.median(whole)  # a share is of the same runs' time, as extract's node shares are
        result[f"{state}_total_ms"] = round(total, 4)
        for k, ts in times.items():
            ms = statistics.median(ts)
            parts.setdefault(str(k), {}).update({f"{state}_ms": round(ms, 4),
                                                 f"{state}_share": round(min(1.0, ms / max(total, 1e-9)), 6)})
    del new.__dict__["_ks_call"]
    new.__dict__["_ks_parts"] = swapped
    result["new_ms"] = round(_median_ms(lambda: new(*inputs), reps, device), 4)
    result["parts"] = parts
    return result


def main(work: Path) -> int:
    from kernelsmith.extract.worker import ModelFailure

    job = json.loads((work / "job.json").read_text())
    try:
        result = run(job, work)
    except ModelFailure as exc:
        result = {"ok": False, "fault": "model", "error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - reported to the orchestrator, which says it in one line
        result = {"ok": False, "fault": "optimize", "error": f"{type(exc).__name__}: {exc}"[:1000],
                  "traceback": traceback.format_exc()[-4000:]}
    tmp = work / "result.tmp"
    tmp.write_text(json.dumps(result, allow_nan=False, default=str))
    os.replace(tmp, work / "result.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
