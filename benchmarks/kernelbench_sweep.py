"""KernelBench as shipped (issue 17): can every size constant be `--set`, and what does the offline seed do?

    python benchmarks/kernelbench_sweep.py KERNELBENCH_DIR [--levels 1 2 3] [--timeout-s 60] [--jobs 2]
        [--out sweep.json] [--no-seed] [--no-shrink] [--only RNN LSTM GRU] [--policy strict|lenient] [--check]

KERNELBENCH_DIR is the folder holding `level1/`, `level2/`, ... (KernelBench's `KernelBench/`), files unchanged.
Each task file is handled in a child forked from this process (torch imported once), killed at `--timeout-s`,
so a hang or a slow task cannot stop the sweep. Per file:

1. **`--set`**: the module-level constants are found by running the file's top-level assignments alone (no
   class, no function, no import: Python itself is the reference, not kernelsmith's static reader). Every
   constant whose value is an int or a tuple/list of ints is set on its own to a small value of its type with
   `Task.load(path, {name: value})`; it counts as settable when the load succeeds and the rewritten source,
   run the same way, gives that value — and agrees with `Task.constants` on every other int constant (the
   ones derived from it followed). A file is refused when any of its constants is not settable.
2. **seed**: the root constants (assigned from literals, not from other names) are shrunk — an int above 128
   halved while it is even and above `--shrink-above` (`--no-shrink`: the shipped sizes), tuples element by element — those `Task.load`
   accepts are applied; where the reference does not run at those sizes, larger thresholds, then every root
   size above the threshold divided by one common power of two (sizes tied by a ratio stay tied),
   and `generate_seeds` runs on the CPU under `--policy`; the first seed (what `evolve` measures first) is the
   one reported and checked. Under lenient a refused model gets the offline proposer's next step too: its
   module calls seeded one by one (`workshop/offline/parts.py`, `from_parts` in the row). Outcome: produced, refused (`SeedUnsupported`: its
   reason, whether it names a line of the task file), error (any other exception) or timeout; the time to the
   outcome.
3. **`--gpu-codegen ARCH`** (CPU): the seed's kernel launches compiled ahead of time for `cuda:ARCH` with
   Triton's own ptxas (`benchmarks/gpu_codegen.py`): the launches of the check, or without `--check` of one
   forward whose kernels are noted and not run. A kernel the interpreter runs but the GPU compiler refuses shows
   up here, not on the device.
4. **`--check`**: a produced seed is run against the reference on the CPU (Triton's interpreter,
   `TRITON_INTERPRET=1`), or on the GPU with `--device cuda` (compiled kernels; each child its own CUDA context,
   so the kernels the CPU interpreter could not finish in time get a verdict): both models built from one torch seed (ModelNew runs the reference's own __init__),
   fresh inputs from `get_inputs()` under another seed, every output compared with atol = rtol = 1e-2 in fp32,
   and the Triton launches counted. Verdict: correct (matches and launched >= 1 kernel), mismatch, no_launch,
   run_error. `correct` is the coverage the issue counts.

This runs the KernelBench files' code in the children: it is a benchmark of the seed generator, not the
product's path (there the seed runs inside a referee child).
"""

from __future__ import annotations

import argparse
import ast
import json
import multiprocessing as mp
import os
import platform
import re
import resource
import statistics
import sys
import time
import traceback
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEVICE = "cuda" if "--device=cuda" in sys.argv or " ".join(sys.argv).count("--device cuda") else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the seeds run on the CPU (--check); set before triton loads

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_codegen  # noqa: E402
import triton  # noqa: E402

from kernelsmith.compiler import SeedUnsupported, generate_seeds  # noqa: E402
from kernelsmith.task import Task, TaskError, load_module  # noqa: E402

SHRINK_ABOVE = 128  # lower and image models downsample to nothing (MobileNet, ViT patches)
GPU_CODEGEN = 0  # --gpu-codegen ARCH: the checked seed's launches also compiled ahead of time for cuda:ARCH
CODEGEN_TRITON = ""  # --codegen-triton DIR: the compile child imports Triton from DIR (the device's version)
MEMORY_BYTES = 12 << 30  # per child: a task at its shipped sizes must not take the machine down


def top_level_values(source: str) -> dict[str, Any]:
    """The values of the module's top-level assignments, run by Python one statement at a time (a statement
    that fails, e.g. a call of a function the file defines, is skipped)."""
    tree = ast.parse(source)
    ns: dict[str, Any] = {"torch": torch, "math": __import__("math")}
    names: list[str] = []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            names += [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]
        try:
            exec(compile(ast.Module([node], []), "<constants>", "exec"), ns)
        except Exception:
            continue
    return {n: ns[n] for n in names if n in ns}


def root_names(source: str) -> set[str]:
    """Constants assigned from literals only (not from other names): shrinking these, the others follow."""
    out: set[str] = set()
    for node in ast.parse(source).body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Name):
                if not any(isinstance(n, ast.Name) for n in ast.walk(node.value)):
                    out.add(t.id)
            elif isinstance(t, (ast.Tuple, ast.List)) and isinstance(node.value, (ast.Tuple, ast.List)):
                for e, v in zip(t.elts, node.value.elts):
                    if isinstance(e, ast.Name) and not any(isinstance(n, ast.Name) for n in ast.walk(v)):
                        out.add(e.id)
    return out


def is_size(v: Any) -> bool:
    if type(v) is int:
        return True
    return isinstance(v, (tuple, list)) and len(v) > 0 and all(type(x) is int for x in v)


def small(v: Any) -> Any:
    """A small value of the constant's type for the settability check (differs from the original)."""
    if type(v) is int:
        return 3 if v == 2 else 2
    return type(v)(small(x) for x in v)


def shrink(v: Any, above: int | None = None) -> Any:
    above = SHRINK_ABOVE if above is None else above
    if type(v) is int:
        while v > above and v % 2 == 0:
            v //= 2
        while v > above * 16:  # an odd size left huge (524280 -> 65535): halved anyway
            v //= 2
        return v
    return type(v)(shrink(x, above) for x in v)


def check_set(path: Path, source: str) -> dict[str, Any]:
    truth = top_level_values(source)
    sizes = {k: v for k, v in truth.items() if is_size(v) and not k.startswith("_")}
    refused: dict[str, str] = {}
    for name, value in sizes.items():
        want = small(value)
        try:
            task = Task.load(path, {name: want}, device="cpu")
        except TaskError as exc:
            refused[name] = f"TaskError: {exc}".replace(str(path), "<file>")[:200]
            continue
        except Exception as exc:  # noqa: BLE001 - a crash is what the sweep is looking for
            refused[name] = f"{type(exc).__name__}: {exc}"[:200]
            continue
        got = top_level_values(task.source)
        if got.get(name) != want:
            refused[name] = f"rewritten source gives {name}={got.get(name)!r}, not {want!r}"
            continue
        stale = [k for k, v in task.constants.items() if is_size(v) and k in got and got[k] != v]
        if stale:
            refused[name] = f"Task.constants disagree with the source after the change: {stale}"
    return {"constants": sorted(sizes), "refused": refused}


def line_named(reason: str, path: Path) -> bool:
    return re.search(re.escape(str(path)) + r":\d+", reason) is not None or re.search(r"\bline \d+", reason) is not None


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)):
        return [x for o in obj for x in _leaves(o)]
    if isinstance(obj, dict):
        return [x for o in obj.values() for x in _leaves(o)]
    return [obj]


def _compare(ref: Any, got: Any) -> str | None:
    """None when `got` matches `ref` (every tensor within atol = rtol = 1e-2 in fp32), else why not."""
    a, b = _leaves(ref), _leaves(got)
    if len(a) != len(b):
        return f"{len(b)} outputs for {len(a)}"
    for k, (x, y) in enumerate(zip(a, b)):
        if isinstance(x, torch.Tensor):
            if not isinstance(y, torch.Tensor) or tuple(x.shape) != tuple(y.shape):
                return f"output {k}: {getattr(y, 'shape', type(y).__name__)} for {tuple(x.shape)}"
            x32, y32 = x.detach().float(), y.detach().float()
            if not torch.allclose(x32, y32, atol=1e-2, rtol=1e-2, equal_nan=True):
                diff = (x32 - y32).abs().nan_to_num(float("inf")).max().item() if x.numel() else 0.0
                return f"output {k}: max abs diff {diff:.3g}"
        elif x != y:
            return f"output {k}: {y!r} for {x!r}"
    return None


def _launcher() -> Any:
    """The class whose `run` launches a Triton kernel here: the interpreter's on the CPU, the JIT's on a GPU."""
    if DEVICE == "cpu":
        from triton.runtime import interpreter

        return interpreter.InterpretedFunction
    from triton.runtime.jit import JITFunction

    return JITFunction


def _on_device(x: Any) -> Any:
    return x.to(DEVICE) if isinstance(x, torch.Tensor) else x


def check_seed(path: Path, task_source: str, seed_source: str) -> dict[str, Any]:
    """The seed against the reference on DEVICE: one construction seed, fresh inputs, launches counted."""
    launcher = _launcher()
    launches = [0]
    specs: list[dict] = []
    real_run = launcher.run

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("warmup"):
            launches[0] += 1
            if GPU_CODEGEN and DEVICE == "cpu":
                specs.append(gpu_codegen.launch_spec(self.fn, self.arg_names, args, kwargs))
        return real_run(self, *args, **kwargs)

    t0 = time.perf_counter()
    try:
        ref = load_module(task_source, str(path), "kb_sweep_reference")
        cand = load_module(seed_source, "<seed>", "kb_sweep_seed")
        torch.manual_seed(1234)
        init = list(ref.get_init_inputs())
        torch.manual_seed(1)
        model = ref.Model(*init).to(DEVICE)
        torch.manual_seed(1)
        new = cand.ModelNew(*init).to(DEVICE)
        torch.manual_seed(2)
        inputs = [_on_device(x) for x in ref.get_inputs()]
        with torch.no_grad():
            torch.manual_seed(3)
            want = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            launcher.run = counted
            try:
                torch.manual_seed(3)
                got = new(*inputs)
                if DEVICE == "cuda":
                    torch.cuda.synchronize()
            finally:
                launcher.run = real_run
    except Exception as exc:  # noqa: BLE001 - what the seed does wrong is the measurement
        return {"verdict": "run_error", "why": f"{type(exc).__name__}: {exc}"[:300],
                "check_s": time.perf_counter() - t0}
    why = _compare(want, got)
    verdict = "mismatch" if why else ("correct" if launches[0] else "no_launch")
    row = {"verdict": verdict, "why": why or "", "launches": launches[0], "check_s": time.perf_counter() - t0}
    if specs:
        row["gpu_codegen"] = compile_for_gpu(seed_source, gpu_codegen.unique(specs))
    return row


def launches_of(path: Path, task_source: str, seed_source: str) -> list[dict]:
    """The seed's Triton launches (argument types, constexprs, warps, stages) from one forward whose kernels are
    noted and not run: the launchers' Python runs, so every launch and its shapes happen, in seconds even where
    the interpreter would take minutes. (Values are garbage: only for `compile_for_gpu`.)"""
    from triton.runtime import interpreter

    specs: list[dict] = []
    real_run = interpreter.InterpretedFunction.run

    def noted(self: Any, *args: Any, **kwargs: Any) -> None:
        if not kwargs.get("warmup"):
            specs.append(gpu_codegen.launch_spec(self.fn, self.arg_names, args, kwargs))

    ref = load_module(task_source, str(path), "kb_codegen_reference")
    cand = load_module(seed_source, "<seed>", "kb_codegen_seed")
    torch.manual_seed(1)
    new = cand.ModelNew(*ref.get_init_inputs())
    interpreter.InterpretedFunction.run = noted
    try:
        with torch.no_grad():
            new(*ref.get_inputs())
    finally:
        interpreter.InterpretedFunction.run = real_run
    return gpu_codegen.unique(specs)


def dry_codegen(path: Path, task_source: str, seed_source: str) -> dict[str, Any]:
    try:
        specs = launches_of(path, task_source, seed_source)
    except Exception as exc:  # noqa: BLE001 - a launcher that needs its kernels' results: said, not fatal
        return {"error": f"noting the launches: {type(exc).__name__}: {exc}"[:300]}
    return compile_for_gpu(seed_source, specs) if specs else {"launches": 0}


def gpu_codegen_triton() -> str:
    """The version of the Triton that compiles for the GPU (this one, or --codegen-triton's)."""
    meta = next(Path(CODEGEN_TRITON).glob("triton-*.dist-info"), None) if CODEGEN_TRITON else None
    return meta.name.removeprefix("triton-").removesuffix(".dist-info") if meta else triton.__version__


def codegen_line(cg: dict[str, Any] | None) -> str:
    """A seed's `gpu_codegen` result in the progress line."""
    if not cg:
        return ""
    if cg.get("error"):
        return cg["error"]
    if not cg.get("launches"):
        return "no launches"
    return f"sm_{cg['arch']} (triton {cg['triton']}): {cg['compiled']}/{cg['launches']} compiled"


def compile_for_gpu(seed_source: str, specs: list[dict]) -> dict[str, Any]:
    """The seed's kernels, as launched in the interpreter, compiled for cuda:GPU_CODEGEN in a child without the
    interpreter (`gpu_codegen.py compile`): a kernel that runs on the CPU but would not compile on the device."""
    import subprocess
    import tempfile

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kb-codegen-") as tmp:
        prog, launches = Path(tmp) / "seed.py", Path(tmp) / "launches.json"
        prog.write_text(seed_source)
        launches.write_text(json.dumps(specs, default=repr))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        if CODEGEN_TRITON:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [CODEGEN_TRITON, env.get("PYTHONPATH")]))
        try:
            got = subprocess.run([sys.executable, str(Path(gpu_codegen.__file__)), "compile", str(prog),
                                  str(launches), str(GPU_CODEGEN)], capture_output=True, text=True, env=env,
                                 timeout=600)
        except subprocess.TimeoutExpired:
            return {"launches": len(specs), "error": "compiling took over 600 s", "s": time.perf_counter() - t0}
    results = [json.loads(ln) for ln in got.stdout.splitlines() if ln.startswith("{")]
    failed = [r for r in results if not r["ok"]]
    out: dict[str, Any] = {"arch": GPU_CODEGEN, "triton": gpu_codegen_triton(), "launches": len(specs),
                           "compiled": len(results) - len(failed), "failed": failed,
                           "s": round(time.perf_counter() - t0, 1)}
    if len(results) < len(specs):
        out["error"] = got.stderr[-500:]
    return out


def _runs_at(path: Path, overrides: dict[str, Any]) -> bool:
    """Whether the reference runs at these (small) sizes: on the CPU, since meta kernels skip some checks
    (a pooling window larger than its input)."""
    try:
        task = Task.load(path, overrides, device="cpu")
        mod = load_module(task.source, str(path), "kb_sweep_probe")
        with torch.no_grad():
            model = mod.Model(*mod.get_init_inputs())
            model(*mod.get_inputs())
        return True
    except Exception:  # noqa: BLE001 - too small for this model (or no meta kernel): try larger sizes
        return False


def _size_of(v: Any) -> int:
    return v if type(v) is int else max((_size_of(x) for x in v), default=0)


def _shrunk(path: Path, truth: dict[str, Any], roots: set[str], above: int) -> tuple[dict, dict]:
    wanted = {k: shrink(v, above) for k, v in truth.items()
              if k in roots and is_size(v) and shrink(v, above) != v}
    applied = {}
    for k, v in wanted.items():  # what this version's --set accepts
        try:
            Task.load(path, {k: v}, device="cpu")
            applied[k] = v
        except (TaskError, Exception):  # noqa: BLE001
            pass
    return wanted, applied


def _halved_together(path: Path, truth: dict[str, Any], roots: set[str]) -> dict[str, Any]:
    """The last rung: every root size above `SHRINK_ABOVE` divided by one common power of two, so sizes tied
    by a ratio stay tied (KernelBench level2/34: LayerNorm(out_channels) over a transposed convolution's
    width, out_channels = 2 * W); the deepest division at which the reference still runs, else nothing."""
    big = {k: v for k, v in truth.items() if k in roots and type(v) is int and v > SHRINK_ABOVE}
    best: dict[str, Any] = {}
    k = 1
    while big and all(v % (1 << k) == 0 for v in big.values()) and max(big.values()) >> k >= SHRINK_ABOVE:
        trial = {n: v >> k for n, v in big.items()}
        try:
            Task.load(path, trial, device="cpu")
        except Exception:  # noqa: BLE001 - what this version's --set refuses stays as shipped
            break
        if not _runs_at(path, trial):
            break
        best, k = trial, k + 1
    return best


def run_seed(path: Path, source: str, shrinking: bool, policy: str = "strict", check: bool = False,
             conn: Any = None) -> dict[str, Any]:
    truth = top_level_values(source)
    roots = root_names(source) if shrinking else set()
    # The smallest sizes of the ladder at which the reference still runs (a CNN downsamples to nothing).
    ladder = sorted({SHRINK_ABOVE, max(SHRINK_ABOVE, 64), max(SHRINK_ABOVE, 128)})
    applied: dict[str, Any] = {}
    wanted: dict[str, Any] = {}
    for above in ladder:
        wanted, trial = _shrunk(path, truth, roots, above)
        if not trial:
            break
        if _runs_at(path, trial):
            applied = trial
            break
        # constants back at their shipped sizes, largest first (an image a fixed pooling window needs whole)
        kept: set[str] = set()
        for k in sorted(trial, key=lambda k: -_size_of(truth[k]))[:4]:
            kept.add(k)
            if _runs_at(path, {n: v for n, v in trial.items() if n not in kept}):
                applied = {n: v for n, v in trial.items() if n not in kept}
                break
        if applied:
            break
    if not applied and roots:  # no rung runs (sizes tied by a ratio): all of them divided together
        applied = _halved_together(path, truth, roots)
    t0 = time.perf_counter()
    try:
        task = Task.load(path, applied, device="cpu")
    except TaskError as exc:  # refused before the seed (e.g. a module that is not installed): what a user sees
        return {"outcome": "refused", "reason": str(exc), "line": line_named(str(exc), path),
                "s": time.perf_counter() - t0, "shrunk": applied, "at": "Task.load"}
    try:
        # The first of the run's seeds (what `evolve` measures first; under lenient, convolutions left to cuDNN
        # where Triton still has work around them); how many seeds round 0 gets.
        result, *others = generate_seeds(task.source, filename=str(path), policy=policy)
        row = {"outcome": "produced", "patterns": result.patterns, "externs": result.externs,
               "vendor": result.vendor, "seeds": 1 + len(others),
               "s": time.perf_counter() - t0, "shrunk": applied, "not_shrunk": sorted(set(wanted) - set(applied))}
        if GPU_CODEGEN and not check:
            row["gpu_codegen"] = dry_codegen(path, task.source, result.source)
        if check:
            if conn is not None:  # the outcome so far, should the check time out
                conn.send({"seed": dict(row, verdict="timeout")})
            row.update(check_seed(path, task.source, result.source))
        return row
    except SeedUnsupported as exc:
        reason = str(exc)
        if policy == "lenient":  # the offline proposer's next step: the model's module calls, seeded one by one
            from kernelsmith.workshop.offline.parts import parts_seed

            got = parts_seed(task.source, str(path))
            if got.source is not None:
                row = {"outcome": "produced", "patterns": got.patterns, "externs": [], "vendor": [], "seeds": 1,
                       "from_parts": reason, "s": time.perf_counter() - t0, "shrunk": applied,
                       "not_shrunk": sorted(set(wanted) - set(applied))}
                if check:
                    if conn is not None:
                        conn.send({"seed": dict(row, verdict="timeout")})
                    row.update(check_seed(path, task.source, got.source))
                return row
            reason = f"{reason}; and {got.why}"
        return {"outcome": "refused", "reason": reason, "line": line_named(reason, path),
                "s": time.perf_counter() - t0, "shrunk": applied, "not_shrunk": sorted(set(wanted) - set(applied))}
    except Exception as exc:  # noqa: BLE001
        return {"outcome": "error", "reason": f"{type(exc).__name__}: {exc}"[:300],
                "where": traceback.format_exc().strip().splitlines()[-3][:200], "s": time.perf_counter() - t0}


def child(path: Path, seed: bool, shrinking: bool, conn: Any, policy: str = "strict", check: bool = False,
          set_check: bool = True) -> None:
    if DEVICE == "cpu":  # a CUDA context reserves far more address space than it uses
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    torch.set_num_threads(1)
    source = path.read_text()
    row: dict[str, Any] = {"set": check_set(path, source) if set_check else {"constants": [], "refused": {}}}
    conn.send(row)
    if seed:
        row["seed"] = run_seed(path, source, shrinking, policy, check, conn)
        conn.send(row)
    conn.close()


def sweep(files: list[Path], seed: bool, shrinking: bool, timeout_s: float, jobs: int, policy: str = "strict",
          check: bool = False, set_check: bool = True) -> dict[str, dict[str, Any]]:
    ctx = mp.get_context("fork")
    pending, running, rows = list(files), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            f = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=child, args=(f, seed, shrinking, send, policy, check, set_check), daemon=True)
            p.start()
            send.close()
            running[f] = (p, recv, time.perf_counter(), {})
        time.sleep(0.02)
        for f, (p, recv, t0, last) in list(running.items()):
            try:
                while recv.poll():
                    last.update(recv.recv())
            except EOFError:
                pass
            done = not p.is_alive()
            if not done and time.perf_counter() - t0 > timeout_s:
                p.kill()
                done = True
                if seed and "seed" not in last:
                    last["seed"] = {"outcome": "timeout", "s": time.perf_counter() - t0,
                                    "reason": f"no outcome after {timeout_s:g} s"}
            if done:
                p.join()
                if "set" not in last:
                    last["set"] = {"constants": [], "refused": {"?": f"child died ({p.exitcode})"}}
                if seed and "seed" not in last:
                    last["seed"] = {"outcome": "error", "reason": f"child died (exit {p.exitcode})", "s": 0.0}
                rows[str(f)] = last
                del running[f]
                sd = last.get("seed", {})
                print(f"{f.parent.name}/{f.name}: {sd.get('outcome', '-')} {sd.get('verdict', '')} "
                      f"{len(last['set']['refused'])} refused {sd.get('why') or sd.get('reason') or ''} "
                      f"{codegen_line(sd.get('gpu_codegen'))}"[:300],
                      file=sys.stderr, flush=True)
    return rows


def summary(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"files": len(rows),
                           "set_refused_files": sum(bool(r["set"]["refused"]) for r in rows.values()),
                           "set_constants": sum(len(r["set"]["constants"]) for r in rows.values()),
                           "set_refused_constants": sum(len(r["set"]["refused"]) for r in rows.values())}
    seeds = [r["seed"] for r in rows.values() if "seed" in r]
    if seeds:
        refusals = [s for s in seeds if s["outcome"] != "produced"]
        times = [s["s"] for s in refusals]
        out.update({
            "seed_produced": sum(s["outcome"] == "produced" for s in seeds),
            "seed_refused": sum(s["outcome"] == "refused" for s in seeds),
            "seed_error": sum(s["outcome"] == "error" for s in seeds),
            "seed_timeout": sum(s["outcome"] == "timeout" for s in seeds),
            "refusals_naming_a_line": sum(bool(s.get("line")) for s in refusals),
            "refusal_s_max": max(times, default=0.0), "refusal_s_median": statistics.median(times) if times else 0.0,
            "checked": sum("verdict" in s for s in seeds),
            "correct": sum(s.get("verdict") == "correct" for s in seeds),
            "mismatch": sum(s.get("verdict") == "mismatch" for s in seeds),
            "run_error": sum(s.get("verdict") == "run_error" for s in seeds),
            "no_launch": sum(s.get("verdict") == "no_launch" for s in seeds),
            "check_timeout": sum(s.get("verdict") == "timeout" for s in seeds),
            "refusals_raw_error_without_line": sum(
                (bool(re.search(r"\((\w+Error|\w+Exception): ", s.get("reason", ""))) or s["outcome"] == "error")
                and not s.get("line") for s in refusals),
        })
    return out


def table(paths: list[Path]) -> str:
    """A markdown table per level from sweep outputs (`python kernelbench_sweep.py table A.json B.json`):
    produced and correct seeds; `correct, no extern` is what strict gives (a lenient seed without externs is
    the strict seed)."""
    rows: dict[str, dict[str, Any]] = {}
    policy = set()
    for path in paths:
        data = json.loads(path.read_text())
        rows.update(data["rows"])
        policy.add(data["env"].get("policy", "strict"))
    levels = sorted({Path(k).parent.name for k in rows})
    out = [f"| level | files | produced ({'/'.join(sorted(policy))}) | correct | correct, no extern | mismatch | "
           "run error | check timeout |", "|---|---|---|---|---|---|---|---|"]
    groups = [(lv, [r["seed"] for k, r in rows.items() if Path(k).parent.name == lv and "seed" in r])
              for lv in levels]
    groups.append(("all", [r["seed"] for r in rows.values() if "seed" in r]))
    for lv, seeds in groups:
        n = len(seeds)
        produced = sum(s["outcome"] == "produced" for s in seeds)
        correct = sum(s.get("verdict") == "correct" for s in seeds)
        pure = sum(s.get("verdict") == "correct" and not s.get("externs") for s in seeds)
        cells = [lv, n, produced, f"{correct} ({100 * correct / max(n, 1):.0f}%)",
                 f"{pure} ({100 * pure / max(n, 1):.0f}%)", sum(s.get("verdict") == "mismatch" for s in seeds),
                 sum(s.get("verdict") == "run_error" for s in seeds), sum(s.get("verdict") == "timeout" for s in seeds)]
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(out)


def main() -> None:
    global SHRINK_ABOVE, GPU_CODEGEN, CODEGEN_TRITON
    if len(sys.argv) > 1 and sys.argv[1] == "table":
        print(table([Path(a) for a in sys.argv[2:]]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path, help="KernelBench's task folder (holding level1/, level2/, ...)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--timeout-s", type=float, default=60.0, help="per file (the --set check and the seed)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    ap.add_argument("--no-seed", action="store_true", help="only the --set check")
    ap.add_argument("--no-shrink", action="store_true", help="the seed at the shipped sizes")
    ap.add_argument("--only", nargs="*", default=[], help="file name substrings to keep (e.g. RNN LSTM GRU)")
    ap.add_argument("--policy", choices=["strict", "lenient"], default="strict",
                    help="the seed's policy (lenient: operators no template covers stay torch calls)")
    ap.add_argument("--check", action="store_true",
                    help="run each produced seed against the reference (--device: cpu = Triton's interpreter)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where --check runs the seeds")
    ap.add_argument("--no-set-check", action="store_true", help="skip the --set check (step 1)")
    ap.add_argument("--shrink-above", type=int, default=SHRINK_ABOVE,
                    help="halve even size constants above this (default %(default)s)")
    ap.add_argument("--gpu-codegen", type=int, default=0, metavar="ARCH",
                    help="on the CPU: compile each seed's kernels for cuda:ARCH (e.g. 90: H100/H200) ahead of "
                         "time, no GPU needed; the launches of the --check run, else of a forward whose kernels "
                         "are noted and not run (seconds, not the interpreter's minutes)")
    ap.add_argument("--codegen-triton", default="", metavar="DIR",
                    help="compile with the Triton installed in DIR (`pip install --target DIR --no-deps "
                         "triton==3.6.0`: the device's version) instead of this environment's")
    ap.add_argument("--out", type=Path, default=Path("kernelbench_sweep.json"))
    args = ap.parse_args()
    files = sorted(f for lv in args.levels for f in (args.kernelbench / f"level{lv}").glob("*.py"))
    if args.only:
        files = [f for f in files if any(o in f.name for o in args.only)]
    if not files:
        sys.exit(f"{args.kernelbench}: no level*/ task files")
    t0 = time.time()
    SHRINK_ABOVE, GPU_CODEGEN, CODEGEN_TRITON = args.shrink_above, args.gpu_codegen, args.codegen_triton
    rows = sweep(files, not args.no_seed, not args.no_shrink, args.timeout_s, args.jobs, args.policy, args.check,
                 not args.no_set_check)
    env = {"date": str(date.today()), "cpus": os.cpu_count(), "python": platform.python_version(),
           "torch": torch.__version__, "triton": triton.__version__, "command": " ".join(sys.argv),
           "wall_s": round(time.time() - t0, 1)}
    env.update(device=torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu", policy=args.policy,
               check=args.check, shrink_above=SHRINK_ABOVE, timeout_s=args.timeout_s,
               machine=platform.processor() or platform.machine())
    per_level = {f"level{lv}": summary({k: r for k, r in rows.items() if Path(k).parent.name == f"level{lv}"})
                 for lv in args.levels}
    result = {"env": env, "summary": summary(rows), "levels": per_level, "rows": rows}
    args.out.write_text(json.dumps(result, indent=1, default=repr))
    print(json.dumps({"env": env, "summary": result["summary"], "levels": per_level}, indent=1))


if __name__ == "__main__":
    main()
