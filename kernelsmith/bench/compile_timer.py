"""`torch.compile` of a task's reference, timed against the eager reference, in a child process.

    python -m kernelsmith.bench.compile_timer JOB.json      (prints one JSON line)

The job holds the task source (overrides applied), its path, the device and the torch.compile backend. On CUDA
the pair is timed with the referee's own harness (`kernelsmith.referee.timing.time_pair`: interleaved, L2
flushed, rotating inputs, CUDA graphs for launch-bound calls), so `compile_ratio = eager_ms / compile_ms` is
measured the way candidate speedups are, and a candidate's speedup against torch.compile is its speedup against
eager divided by that ratio. On the CPU (used by the tests only; the bench reports CPU as "not measured") the
two are timed with a wall clock. Task code runs only here, never in the bench process.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _time_cpu(fn: Any, inputs: list[Any], reps: int = 20) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn(*inputs)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kernelsmith.referee.compare import compare_outputs
    from kernelsmith.referee.worker import _build, make_inputs, set_precision
    from kernelsmith.settings import DEFAULT_PRECISION
    from kernelsmith.task import load_module

    device, backend = job["device"], job.get("backend", "inductor")
    precision = job.get("precision") or DEFAULT_PRECISION
    set_precision(precision)  # the referee's own setting: torch's default would let cuDNN convolutions run in tf32
    module = load_module(job["source"], job["path"], "compile_timer_task")
    model = _build(module, "Model", module, 0, device)
    model.eval()
    compiled = torch.compile(model, backend=backend)
    x = make_inputs(module, 0, device)
    with torch.no_grad():
        t0 = time.perf_counter()
        compiled(*x)
        if device == "cuda":
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        if device == "cuda":
            from kernelsmith.referee.timing import time_pair

            r = time_pair(model, compiled, lambda seed: make_inputs(module, seed, device),
                          lambda a, b: compare_outputs(a, b).ok)
            eager_ms, compile_ms, method = r.ref_ms, r.cand_ms, r.method
        else:
            compiled(*x)
            eager_ms, compile_ms, method = _time_cpu(model, x), _time_cpu(compiled, x), "wall-clock"
    return {"eager_ms": eager_ms, "compile_ms": compile_ms, "compile_ratio": eager_ms / compile_ms,
            "compile_s": round(compile_s, 2), "method": method, "backend": backend, "precision": precision,
            "error": ""}


def time_compile(source: str, path: str, device: str, *, backend: str = "inductor", precision: str | None = None,
                 timeout_s: float = 900.0) -> dict[str, Any]:
    """Run the child at `precision` (default: the settings' default, as the referee does); never raises: a
    failure comes back as {"error": ...} with no times."""
    with tempfile.TemporaryDirectory(prefix="ks-compile-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"source": source, "path": path, "device": device, "backend": backend,
                                   "precision": precision}))
        try:
            proc = subprocess.run([sys.executable, "-m", "kernelsmith.bench.compile_timer", str(job)],
                                  capture_output=True, text=True, timeout=timeout_s, cwd=tmp)
        except subprocess.TimeoutExpired:
            return {"error": f"torch.compile timing took longer than {timeout_s:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [f"exit code {proc.returncode}"]
        return {"error": f"torch.compile timing failed: {tail[0][:300]}"}
    return json.loads(lines[-1])


def main(argv: list[str]) -> int:
    job = json.loads(Path(argv[0]).read_text())
    try:
        result = measure(job)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as the reason compile was not measured
        result = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover - the child entry point
    raise SystemExit(main(sys.argv[1:]))
