"""The offline compiler on the GPU beside eager and torch.compile, in one run, at one fp32 precision setting.

    python benchmarks/offline_vs_compile.py FILE_OR_DIR ... [--sample 12 12 8] [--include NAME ...]
        [--workers 8] [--variants 12] [--policy lenient] [--precision tf32x3] [--deadline-s 540] --out X.json
    python benchmarks/offline_vs_compile.py tasks/level1/01_relu.py --device cpu --out /tmp/x.json  # smoke test

FILE_OR_DIR: task files, or folders holding `level1/`, `level2/`, ... (KernelBench's `KernelBench/` folder,
files unchanged, at their shipped sizes). From a folder, `--sample A B C` takes A files of level 1, B of level 2,
C of level 3, spread evenly over each level's sorted list (deterministic), plus every file named by `--include`.

Per task, in worker processes (`--workers`, each with its own CUDA context), all at `--precision` (the referee's
setting: ieee | tf32x3 | tf32; see `kernelsmith.referee.worker.set_precision`):

1. **prepare** (in parallel): the task at its sizes; the offline compiler's seed (`generate_seed`, `--policy`;
   under lenient, a task whose seed has Triton convolutions also gets a seed with cuDNN's, `vendor=("conv",)`);
   tuner variants — a Latin-hypercube sample of the seed's launch knobs taken jointly (the product tuner's
   space and sampler, `kernelsmith.workshop.offline.tune`), each compiled and checked against eager on a fresh
   input (the referee's tolerances); `torch.compile` warmed at the precision and with TF32 allowed (so timing
   below reads the compile caches);
2. **time** under a lease: one worker at a time, every other worker's process group stopped (SIGSTOP) while it
   times, so no compilation or other kernel shares the GPU or the CPU. `triton.testing.do_bench` medians (L2
   flushed between calls) of eager and `torch.compile` at the precision, eager and `torch.compile` with TF32
   allowed (`[tf32]`, tasks with fp32 matmuls or convolutions only; elsewhere the flag changes nothing), the
   seed and every correct variant; successive halving (the faster half timed again, longer), then the best's
   one-knob neighbours are compiled outside the lease and timed in a second one;
3. **judge** the fastest program through the referee (`LocalPool`: fresh sandboxes, five correctness trials,
   hidden inputs, interleaved timing against eager under the pool's own lease): that speedup, with its 95%
   interval, is the one reported as ours. "kept" applies `kernelsmith optimize`'s swap rule: the kernel is kept
   when its interval lies above 1, else the reference stays (1.00x), so no kept kernel is slower than eager.

Steps 1-2 run generated code in the workers: a benchmark shortcut for the search (the product's evolve sends
every variant through the referee). Rows are written to `--out` as each task ends; a task running past
`--task-timeout-s` (frozen time not counted) is killed and recorded as such, and once a task has run
`--prepare-share` of that time it compiles no more variants or neighbours (it is timed with what it has);
`--deadline-s` stops handing out tasks, keeping time for step 3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections import deque
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEVICE = "cpu" if "--device=cpu" in sys.argv or " ".join(sys.argv).count("--device cpu") else "cuda"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # the smoke test: must precede triton's import
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # compile in-process: a stopped worker stops it too

DOTS = re.compile(r"matmul|\bmm\(|bmm|addmm|einsum|Linear|[Cc]onv|\s@\s|GRU|LSTM|RNN|Multihead|scaled_dot_product"
                  r"|Bilinear|tensordot|linear\(")


# ------------------------------------------------------------------------------------------------ selection


def select(items: list[str], sample: list[int], include: list[str]) -> list[Path]:
    """Files to run: each file given; from each folder, `sample[L-1]` files of level L spread evenly over the
    sorted list, plus the files whose name contains an `include` string. Folder files are interleaved across
    levels, the slowest (level 3's whole models) first in each turn, so a deadline cuts every level alike."""
    out: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_file():
            out.append(p)
            continue
        per_level: list[list[Path]] = []
        for lv, n in enumerate(sample, start=1):
            files = sorted((p / f"level{lv}").glob("*.py"))
            if not files or n <= 0:
                continue
            step = len(files) / min(n, len(files))
            picked = [f for f in files if any(s in f.name for s in include)]
            picked += [files[int(i * step)] for i in range(min(n, len(files)))]
            per_level.append(list(dict.fromkeys(picked)))
        for turn in range(max(map(len, per_level), default=0)):
            out += [files[turn] for files in reversed(per_level) if turn < len(files)]
    return list(dict.fromkeys(out))


def level_of(path: Path) -> str:
    return next((part for part in reversed(path.parts) if part.startswith("level")), "other")


# ------------------------------------------------------------------------------------------------ the worker


class Lease:
    """The worker's side of the timing lease: ask the parent, wait for the go, say when done."""

    def __init__(self, conn: Any):
        self.conn = conn

    def __enter__(self) -> Lease:
        sync()  # this worker's own queued kernels are done before it asks
        self.conn.send(("want", None))
        assert self.conn.recv() == ("go", None)
        time.sleep(0.05)  # kernels a stopped worker had queued drain (each syncs after every check)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.conn.send(("release", None))


def worker(conn: Any, args: argparse.Namespace) -> None:
    os.setpgrp()  # the parent stops this process group (ptxas and friends included) while another times
    import torch

    torch.set_num_threads(1 if DEVICE == "cuda" else 2)
    lease = Lease(conn)
    with tempfile.TemporaryDirectory(prefix="offline-vs-compile-") as tmp:
        while True:
            kind, path = conn.recv()
            if kind == "stop":
                return
            t0 = time.perf_counter()
            try:
                row = run_task(Path(path), args, Path(tmp), lease)
            except Exception:  # noqa: BLE001 - one broken task must not lose the others' numbers
                row = {"crash": traceback.format_exc()[-2000:]}
            row.update(task=path, level=level_of(Path(path)), worker_s=round(time.perf_counter() - t0, 1))
            conn.send(("row", row))
            if "crash" in row:
                return  # a CUDA error can leave the context unusable: the parent starts a fresh worker


_loaded = 0


def build(module: Any, cls: str, task_module: Any = None) -> Any:
    """As KernelBench and the referee do: the same seed before the init inputs and before the constructor."""
    import torch

    torch.manual_seed(42)
    init = list((task_module or module).get_init_inputs())
    torch.manual_seed(42)
    return getattr(module, cls)(*init).to(DEVICE).eval()


def inputs_for(module: Any, seed: int) -> list:
    import torch

    torch.manual_seed(seed)
    with torch.device(DEVICE):
        return [x.to(DEVICE) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]


def sync() -> None:
    if DEVICE == "cuda":
        import torch

        torch.cuda.synchronize()


def outs(x: Any) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def bench(fn: Any, inputs: list, rep_ms: int) -> float:
    import torch
    import triton.testing

    with torch.no_grad():
        if DEVICE == "cpu":
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                fn(*inputs)
                times.append((time.perf_counter() - t0) * 1e3)
            return statistics.median(times)
        return float(triton.testing.do_bench(lambda: fn(*inputs), warmup=5, rep=rep_ms, return_mode="median"))


def load_program(source: str, workdir: Path) -> Any:
    """Triton reads kernel source through the file, so each variant gets one."""
    from kernelsmith.task import load_module

    global _loaded
    _loaded += 1
    path = workdir / f"variant_{os.getpid()}_{_loaded}.py"
    path.write_text(source)
    return load_module(source, str(path), f"offline_variant_{os.getpid()}_{_loaded}")


def prepare(source: str, module: Any, checks: list[tuple[list, list]], workdir: Path) -> tuple[Any, str]:
    """The program built and run once per check (compiling its kernels), or (None, why not)."""
    import torch

    from kernelsmith.referee.compare import compare_outputs

    try:
        cand = build(load_program(source, workdir), "ModelNew", module)
        with torch.no_grad():
            for x, want in checks:
                got = outs(cand(*x))
                sync()
                cmp = compare_outputs(got, want)
                if not cmp.ok:
                    return None, f"incorrect: {cmp.reason}"
        return cand, ""
    except Exception as exc:  # noqa: BLE001 - a variant that fails to compile is skipped, with its reason
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"


def compiled(reference: Any, x: list, precision: str) -> tuple[Any, float, str]:
    """`torch.compile(reference)` at `precision`, called twice (compiled, then warm): (fn or None, s, error)."""
    import torch

    from kernelsmith.referee.worker import set_precision

    set_precision(precision)
    torch._dynamo.reset()
    try:
        fn = torch.compile(reference)
        t0 = time.perf_counter()
        with torch.no_grad():
            fn(*x)
            fn(*x)
        sync()
        return fn, time.perf_counter() - t0, ""
    except Exception as exc:  # noqa: BLE001
        return None, 0.0, f"{type(exc).__name__}: {str(exc)[:300]}"


def run_task(path: Path, args: argparse.Namespace, workdir: Path, lease: Lease) -> dict:
    import torch

    from kernelsmith.compiler import SeedUnsupported, generate_seed
    from kernelsmith.referee.worker import set_precision
    from kernelsmith.task import Task, load_module
    from kernelsmith.workshop.offline import tune
    from kernelsmith.workshop.offline.mutate import knobs

    p = args.precision
    t_task = time.monotonic()

    overrides = fit(path, int(args.max_input_gib * (1 << 30))) if args.max_input_gib > 0 else {}
    task = Task.load(path, overrides, device=DEVICE)
    module = load_module(task.source, str(path), "offline_task_" + re.sub(r"\W", "_", path.stem))
    set_precision(p)
    reference = build(module, "Model")
    x = inputs_for(module, 0)
    checks = []
    for s in (1234,):
        xc = inputs_for(module, s)
        with torch.no_grad():
            checks.append((xc, outs(reference(*[v.clone() if isinstance(v, torch.Tensor) else v for v in xc]))))
    sync()
    dots = bool(DOTS.search(task.source))
    row: dict[str, Any] = {"precision": p, "fp32_dots": dots, "set": overrides,
                           "input_gib": round(input_bytes(module)[0] / (1 << 30), 3)}

    # 1. prepare: compile caches for the baselines, the seed, the sampled variants
    if not args.skip_compile:
        for key, prec in ((p, p), ("tf32", "tf32")) if dots and p != "tf32" else ((p, p),):
            fn, secs, err = compiled(reference, x, prec)
            row[f"compile_{key}_compile_s"], row[f"compile_{key}_error"] = round(secs, 1), err
        set_precision(p)
        torch._dynamo.reset()
    # the seeds: the compiler's, and under lenient with library convolutions also one with cuDNN's (an extern,
    # its epilogue still fused): which is faster depends on the shapes, so both are timed
    seeds: dict[str, Any] = {}
    for label, vendor in (("seed", ()), ("seed[cuDNN conv]", ("conv",))):
        t0 = time.perf_counter()
        try:
            seeds[label] = generate_seed(task.source, filename=str(path), policy=args.policy, precision=p,
                                         vendor=vendor)
        except SeedUnsupported as exc:
            row.setdefault("seed_error", str(exc))
        row[f"{label}_s"] = round(time.perf_counter() - t0, 2)
        if label == "seed" and (args.policy != "lenient" or "library:conv" not in getattr(
                seeds.get("seed"), "patterns", [])):
            break

    def configured(base: str, space: Any, c: tuple, record: dict, into: list) -> Any:
        """The program of `base` at knob configuration `c`, compiled and checked (None if it fails), its outcome
        appended to `into`. Past `--prepare-share` of the task's time nothing more is compiled (a large dot tile
        can take a minute): the task goes on to be timed with what it has."""
        if time.monotonic() - t_task > args.prepare_share * args.task_timeout_s:
            into.append({**record, "config": list(c), "check": "skipped: past the preparation budget"})
            return None
        src = tune.with_config(base, space, c, knobs)
        built, why = prepare(src, module, checks, workdir)
        into.append({**record, "config": list(c), "check": why or "correct"})
        return None if built is None else (src, built)

    programs: dict[str, tuple[str, Any]] = {}  # label -> (source, built model)
    spaces: dict[str, tuple[Any, str]] = {}  # label -> (its seed's knob space, that seed's source)
    for label, seed in seeds.items():
        row.setdefault("patterns", {})[label] = seed.patterns
        row.setdefault("externs", {})[label] = seed.externs
        cand, why = prepare(seed.source, module, checks, workdir)
        row[f"{label}_check"] = why or "correct"
        row.setdefault("seed_check", why or "correct")
        parsed = tune.parse(seed.source, knobs) if cand is not None else None
        if cand is not None:
            programs[label] = (seed.source, cand)
        if parsed is None:
            continue
        space = tune.space_of(parsed)
        spaces[label] = (space, seed.source)
        rng = random.Random(f"{path.name}:{label}:{args.seed}")
        n = args.variants // len(seeds)
        configs = [c for c in dict.fromkeys(tune.latin_hypercube(space, n, rng)) if c != parsed.config]
        row.setdefault("space", {})[label] = {"knobs": list(space.names), "size": space.size(),
                                              "seed": list(parsed.config)}
        for c in configs:
            program = configured(seed.source, space, c, {"seed": label}, row.setdefault("variants", []))
            if program is not None:
                programs[f"{label}: {space.describe(c)}"] = program

    # 2. time under the lease: baselines, then every program, then the faster half again
    times: dict[str, float] = {}
    with lease:
        row.update(time_baselines(reference, x, p, dots and not args.skip_compile, args.skip_compile))
        for label, (_, built) in programs.items():
            times[label] = bench(built, x, 25)
        alive = sorted(times, key=times.get)[: max(2, len(times) // 2)]
        for label in alive:
            times[label] = min(times[label], bench(programs[label][1], x, 60))
    best = min(times, key=times.get) if times else None

    # the best's one-knob neighbours, compiled outside the lease, timed in a second one
    home = best.split(":")[0] if best else None
    if home in spaces:
        space, base = spaces[home]
        best_parsed = tune.parse(programs[best][0], knobs)
        near = [c for c in tune.neighbours(space, best_parsed.config, random.Random(args.seed))
                if f"{home}: {space.describe(c)}" not in programs][: args.neighbours] if best_parsed else []
        fresh = []
        for c in near:
            program = configured(base, space, c, {}, row.setdefault("neighbours", []))
            if program is not None:
                fresh.append(f"{home}: {space.describe(c)}")
                programs[fresh[-1]] = program
        if fresh:
            with lease:
                for label in fresh:
                    times[label] = bench(programs[label][1], x, 60)
                times[best] = min(times[best], bench(programs[best][1], x, 60))
            best = min(times, key=times.get)
    row.update(seed_ms=times.get("seed"), seed_cudnn_ms=times.get("seed[cuDNN conv]"),
               tuned_ms=times.get(best) if best else None, best=best, programs_timed=len(times),
               best_source=programs[best][0] if best else None)
    set_precision(p)
    return row


def input_bytes(module: Any) -> tuple[int, bool]:
    """(bytes, ran): the bytes of the task's inputs and of its outputs (the model run on the meta device: nothing
    allocated; a convolution's output is often far larger than its input), or of the inputs alone where meta
    cannot run it (`ran` False: an op without a meta kernel, or sizes the forward refuses)."""
    import torch

    def size(xs: Any) -> int:
        return sum(x.numel() * x.element_size() for x in outs(xs) if isinstance(x, torch.Tensor))

    validate = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)  # HingeLoss's Pareto checks values
    try:
        with torch.device("meta"):
            xs = module.get_inputs()
    except Exception:  # noqa: BLE001 - an input maker meta cannot run: made for real, then sized on meta
        xs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate)
    with torch.device("meta"):
        try:
            with torch.no_grad():
                return size(xs) + size(module.Model(*module.get_init_inputs())(*xs)), True
        except Exception:  # noqa: BLE001 - see `ran`
            return size(xs), False


def halvings(constants: dict[str, Any], derived: Any) -> list[dict[str, Any]]:
    """Ways to halve the task's batch, in the order tried: its `batch_size` (else its largest even int), alone,
    then with every constant that holds the same number (HingeLoss broadcasts `batch_size` against
    `input_shape = (32768,)`: halving one alone breaks the forward), then the other even ints, largest first."""
    ints = {k: v for k, v in constants.items() if type(v) is int and v > 1 and v % 2 == 0 and k not in derived}
    order = sorted(ints, key=lambda k: (k != "batch_size", -ints[k]))
    out: list[dict[str, Any]] = []
    for name in order:
        v = ints[name]
        out.append({name: v // 2})
        tied = {k: (c // 2 if type(c) is int else type(c)(e // 2 if e == v else e for e in c))
                for k, c in constants.items() if k not in derived and k != name
                and (c == v if type(c) is int else isinstance(c, (tuple, list)) and v in c
                     and all(type(e) is int for e in c))}
        if tied:
            out.append({name: v // 2, **tied})
    return out


def fit(path: Path, limit: int) -> dict[str, Any]:
    """`--set` overrides that halve the task's batch (see `halvings`) until its inputs and outputs take at most
    `limit` bytes: KernelBench's current sizes (6 GiB inputs) would not let a few tasks share the GPU. Where the
    shipped forward runs on the meta device, a halving it refuses is not taken. Empty when the task fits as
    shipped (or nothing can be halved)."""
    from kernelsmith.task import Task, TaskError, load_module

    def measure(overrides: dict[str, Any]) -> tuple[Any, int, bool]:
        task = Task.load(path, overrides, device="cpu")
        module = load_module(task.source, str(path), "offline_fit_" + re.sub(r"\W", "_", path.stem))
        return (task, *input_bytes(module))

    overrides: dict[str, Any] = {}
    task, nbytes, runs = measure(overrides)
    for _ in range(12):
        if nbytes <= limit:
            return overrides
        for change in halvings(task.constants, task.derived):
            try:
                got = measure({**overrides, **change})
            except (TaskError, ValueError, TypeError):
                continue
            if got[1] < nbytes and (got[2] or not runs):
                overrides = {**overrides, **change}
                task, nbytes, _ = got
                break
        else:
            return overrides
    return overrides


def time_baselines(reference: Any, x: list, p: str, tf32: bool, skip_compile: bool) -> dict[str, Any]:
    """Eager and torch.compile at `p`, and with TF32 allowed where the task has fp32 dots (compiled from the warm
    caches the preparation left; the compile seconds here are cache loads)."""
    from kernelsmith.referee.worker import set_precision

    out: dict[str, Any] = {}
    for key in (p, "tf32") if tf32 and p != "tf32" else (p,):
        set_precision(key)
        out[f"eager_{key}_ms"] = bench(reference, x, 60)
        if not skip_compile:
            fn, secs, err = compiled(reference, x, key)
            out[f"compile_{key}_ms"] = bench(fn, x, 60) if fn is not None else None
            out[f"compile_{key}_load_s"] = round(secs, 1)
            out[f"compile_{key}_error"] = err or out.get(f"compile_{key}_error", "")
    if p != "tf32" and "eager_tf32_ms" not in out:  # no fp32 dot: the flag changes nothing
        out["eager_tf32_ms"], out["compile_tf32_ms"] = out[f"eager_{p}_ms"], out.get(f"compile_{p}_ms")
    set_precision(p)
    return out


# ------------------------------------------------------------------------------------------------ the parent


class Worker:
    def __init__(self, ctx: Any, args: argparse.Namespace):
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=worker, args=(theirs, args), daemon=True)
        self.proc.start()
        theirs.close()
        self.task: str | None = None
        self.started = 0.0
        self.frozen_s = 0.0  # time stopped or waiting for the lease: not counted against the task
        self.queued_at = 0.0

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def busy_s(self) -> float:
        return time.monotonic() - self.started - self.frozen_s


def run_all(files: list[Path], args: argparse.Namespace, save: Any) -> list[dict]:
    """Hand the files to the workers, arbitrate the timing lease, kill a task past its time."""
    import multiprocessing as mp
    from multiprocessing.connection import wait

    ctx = mp.get_context("spawn")
    pending = deque(str(f) for f in files)
    workers = [Worker(ctx, args) for _ in range(min(args.workers, len(files)) or 1)]
    rows: list[dict] = []
    holder: Worker | None = None
    frozen_at = 0.0
    queue: deque[Worker] = deque()
    t_start = time.monotonic()

    def unfreeze() -> None:
        nonlocal holder
        gone = time.monotonic() - frozen_at
        for w in workers:
            if w is not holder:
                w.frozen_s += gone
                w.signal(signal.SIGCONT)
        holder = None

    def finish(w: Worker, row: dict) -> None:
        rows.append(row)
        save(rows)
        print(f"{row['task']}: seed {row.get('seed_check', row.get('seed_error', row.get('crash', ''))[:80])} "
              f"({row.get('worker_s')} s)", flush=True)
        w.task = None

    while pending or any(w.task for w in workers):
        for i, w in enumerate(workers):
            if w.task is None and not w.proc.is_alive():
                w.proc.join()
                workers[i] = w = Worker(ctx, args)
            if w.task is None and pending and time.monotonic() - t_start < args.deadline_s:
                w.task, w.started, w.frozen_s = pending.popleft(), time.monotonic(), 0.0
                w.conn.send(("task", w.task))
        if not any(w.task for w in workers):
            break
        for conn in wait([w.conn for w in workers if w.task], timeout=1.0):
            w = next(w for w in workers if w.conn is conn)
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                kind, payload = "died", None
            if kind == "want":
                w.queued_at = time.monotonic()
                queue.append(w)
            elif kind == "release":
                unfreeze()
            elif kind == "row":
                finish(w, payload)
                if "crash" in payload:  # the worker exits after a crash: wait for it, start a fresh one
                    w.proc.join(10)
                    workers[workers.index(w)] = Worker(ctx, args)
            elif kind == "died":
                if holder is w:
                    unfreeze()
                finish(w, {"task": w.task, "level": level_of(Path(w.task)), "crash": "worker died",
                           "worker_s": round(w.busy_s(), 1)})
                workers[workers.index(w)] = Worker(ctx, args)
        cut = time.monotonic() - t_start > args.hard_deadline_s
        for w in list(workers):
            frozen = holder is not None and w is not holder
            over = w.task and not frozen and w not in queue and w.busy_s() > args.task_timeout_s
            if over or (w.task and cut):
                w.signal(signal.SIGCONT)
                w.signal(signal.SIGKILL)
                w.proc.join(5)
                if holder is w:
                    unfreeze()
                finish(w, {"task": w.task, "level": level_of(Path(w.task)), "worker_s": round(w.busy_s(), 1),
                           "crash": f"killed after {args.task_timeout_s:g} s of work" if over else
                           f"cut at the run's hard deadline ({args.hard_deadline_s:g} s)"})
                if cut:
                    workers.remove(w)
                else:
                    workers[workers.index(w)] = Worker(ctx, args)
        if cut:
            break
        if holder is None and queue:
            holder = queue.popleft()
            if holder.task is None or not holder.proc.is_alive():
                holder = None
                continue
            frozen_at = time.monotonic()
            holder.frozen_s += frozen_at - holder.queued_at
            for w in workers:
                if w is not holder:
                    w.signal(signal.SIGSTOP)
            holder.conn.send(("go", None))
    for w in workers:
        w.signal(signal.SIGCONT)
        try:
            w.conn.send(("stop", None))
        except OSError:
            pass
    for w in workers:
        w.proc.join(10)
        if w.proc.is_alive():
            w.signal(signal.SIGKILL)
    skipped = [{"task": t, "level": level_of(Path(t)), "crash": "not started before the deadline"} for t in pending]
    return rows + skipped


def judge(rows: list[dict], args: argparse.Namespace) -> None:
    """Step 3: every best program through the referee's pool, in parallel under the pool's timing lease."""
    from kernelsmith.referee.pool import LocalPool
    from kernelsmith.settings import EvalRequest, EvalSettings
    from kernelsmith.task import Task

    todo = [r for r in rows if r.get("best_source") and not r.get("status")]  # resumed rows keep their verdict
    if not todo:
        return
    opts = EvalSettings(device=DEVICE, policy=args.policy, precision=args.precision, timeout_s=300,
                        timing={"budget_s": args.budget_s})
    pool = LocalPool(device=DEVICE, slots_per_gpu=args.slots) if DEVICE == "cuda" else LocalPool(device="cpu")
    # At the sizes the programs were screened at (`fit`'s overrides applied to the task's source).
    requests = [EvalRequest(task_source=Task.load(r["task"], r.get("set") or {}, device=DEVICE).source,
                            task_name=Path(r["task"]).name,
                            candidate_source=r["best_source"], options=opts) for r in todo]
    t0 = time.monotonic()
    for r, v in zip(todo, pool.evaluate_many(requests)):
        r.update(status=v.get("status"), speedup=v.get("speedup"), speedup_ci=v.get("speedup_ci"),
                 ref_ms=v.get("ref_ms"), cand_ms=v.get("cand_ms"), max_rel_err=v.get("max_rel_err"),
                 error=(v.get("error") or "")[:500], verdict_precision=v.get("precision"))
        ci = r.get("speedup_ci") or [0, 0]
        r["kept"] = r["speedup"] if r["status"] == "correct" and ci[0] > 1 else 1.0
    print(f"referee: {len(todo)} verdicts in {time.monotonic() - t0:.0f} s", flush=True)


# ------------------------------------------------------------------------------------------------ the report


def geomean(xs: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def fx(x: float | None) -> str:
    return f"{x:.2f}×" if x else "—"


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def report(rows: list[dict], p: str) -> str:
    lines = [f"Speedups over eager [{p}]; [tf32]: TF32 allowed (one tf32 pass per fp32 dot; tasks without fp32 "
             "dots are unaffected). ours = the referee's verdict of the fastest program; kept = ours when its "
             "interval lies above 1, else the reference (1.00×).", "",
             f"| task | eager [{p}] ms | torch.compile [{p}] | eager [tf32] | torch.compile [tf32] | seed [{p}] "
             f"| tuned [{p}] | ours: referee [{p}] (95% CI) | kept | status |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = r.get(f"eager_{p}_ms")
        if not e:
            why = r.get("crash") or r.get("seed_error") or ""
            lines.append(f"| {r['task'].split('/')[-2]}/{Path(r['task']).name} | — | | | | | | | | "
                         f"{why.splitlines()[-1][:90] if why else '—'} |")
            continue
        sp = (f"{r['speedup']:.2f}× ({r['speedup_ci'][0]:.2f}–{r['speedup_ci'][1]:.2f})" if r.get("speedup") else "—")
        mark = f" (from {r['measured_in']})" if r.get("measured_in") else ""
        lines.append(f"| {Path(r['task']).parent.name}/{Path(r['task']).name}{mark} | {e:.4f} | "
                     f"{fx(ratio(e, r.get(f'compile_{p}_ms')))} | {fx(ratio(e, r.get('eager_tf32_ms')))} | "
                     f"{fx(ratio(e, r.get('compile_tf32_ms')))} | {fx(ratio(e, r.get('seed_ms')))} | "
                     f"{fx(ratio(e, r.get('tuned_ms')))} | {sp} | {fx(r.get('kept'))} | "
                     f"{(r.get('status') or r.get('seed_check') or r.get('seed_error') or '')[:70]} |")
    lines.append("")
    for level in sorted({r["level"] for r in rows}):
        mine = [r for r in rows if r["level"] == level and r.get(f"eager_{p}_ms")]
        ours = [r["speedup"] for r in mine if r.get("status") == "correct" and r.get("speedup")]
        kept = [r.get("kept") or 1.0 for r in mine]  # a task with no correct program keeps the reference
        # The search stage's own timing of its fastest program (no referee): the figure when judging never ran.
        tuned = [max(1.0, r[f"eager_{p}_ms"] / r["tuned_ms"]) if r.get("tuned_ms") else 1.0 for r in mine]
        line = (f"{level}: {len(mine)} tasks timed; ours {fx(geomean(ours))} over its {len(ours)} correct; "
                f"kept {fx(geomean(kept))} over all {len(mine)}; tuned, search stage (slower kept as 1.00×) "
                f"{fx(geomean(tuned))} over all {len(mine)}")
        for key, label in ((f"compile_{p}_ms", f"torch.compile [{p}]"), ("eager_tf32_ms", "eager [tf32]"),
                           ("compile_tf32_ms", "torch.compile [tf32]")):
            both = [r for r in mine if r.get(key)]
            line += f"; {label} {fx(geomean([r[f'eager_{p}_ms'] / r[key] for r in both]))} over {len(both)}"
        lines.append(line)
    return "\n".join(lines)


def resumed(paths: list[Path], precision: str) -> list[dict]:
    """The finished rows of earlier runs (timed, or refused by the compiler; not crashed, cut or unstarted), so
    a sample spread over several device calls is one table. A row at another precision is an error."""
    rows: dict[str, dict] = {}
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            sys.exit(f"{path}: not a results file of this script ({exc})")
        if data.get("env", {}).get("precision") != precision:
            sys.exit(f"{path}: its precision is {data.get('env', {}).get('precision')!r}, this run's {precision!r}")
        for r in data.get("results", []):
            if "crash" not in r:
                r.setdefault("measured_in", path.name)  # the report marks it: which call (code, device) timed it
                rows[f'{level_of(Path(r["task"]))}/{Path(r["task"]).name}'] = r
    return list(rows.values())


def main() -> None:
    from kernelsmith.settings import PRECISIONS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("items", nargs="+", help="task files, or folders with level1/ level2/ ... (KernelBench)")
    ap.add_argument("--sample", type=int, nargs="+", default=[12, 12, 8], help="files per level from a folder")
    ap.add_argument("--include", nargs="*", default=[], help="file name substrings always taken from a folder")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--variants", type=int, default=12, help="sampled knob configurations per task")
    ap.add_argument("--neighbours", type=int, default=6, help="one-knob neighbours of the best, timed after")
    ap.add_argument("--policy", choices=["strict", "lenient"], default="lenient")
    ap.add_argument("--precision", choices=list(PRECISIONS), default="tf32x3")
    ap.add_argument("--budget-s", type=float, default=0.5, help="the referee's timing budget")
    ap.add_argument("--slots", type=int, default=None, help="the referee pool's slots (default: automatic)")
    ap.add_argument("--task-timeout-s", type=float, default=240.0)
    ap.add_argument("--prepare-share", type=float, default=0.5,
                    help="no variant or neighbour is compiled once a task has run this share of its timeout")
    ap.add_argument("--deadline-s", type=float, default=300.0, help="no task is started after this")
    ap.add_argument("--hard-deadline-s", type=float, default=420.0, help="tasks still running are cut here")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-input-gib", type=float, default=1.0,
                    help="a task's batch is halved (--set) until its inputs and outputs fit (0: as shipped)")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--no-referee", action="store_true")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--resume", type=Path, nargs="*", default=[],
                    help="earlier --out files: their finished rows are kept and those tasks not run again")
    ap.add_argument("--rerun", nargs="*", default=[],
                    help="file name substrings: those resumed rows are dropped and the tasks timed again")
    ap.add_argument("--out", type=Path, default=Path("offline.json"))
    args = ap.parse_args()
    if DEVICE == "cpu":
        args.skip_compile = True
    files = select(args.items, args.sample, args.include)
    if not files:
        sys.exit(f"{' '.join(args.items)}: no task files")
    earlier = [r for r in resumed(args.resume, args.precision)
               if not any(n in Path(r["task"]).name for n in args.rerun)]
    done = {(level_of(Path(r["task"])), Path(r["task"]).name) for r in earlier}
    files = [f for f in files if (level_of(f), f.name) not in done]  # none left: the resumed rows are judged
    import torch
    import triton

    env = {"date": str(date.today()), "device": "cpu" if DEVICE == "cpu" else "(see rows: the parent makes no "
           "CUDA context before the workers)", "python": platform.python_version(), "torch": torch.__version__,
           "triton": triton.__version__, "precision": args.precision, "precision_means": PRECISIONS[args.precision],
           "policy": args.policy, "command": " ".join(sys.argv), "files": [str(f) for f in files]}

    def save(rows: list[dict]) -> None:
        args.out.write_text(json.dumps({"env": env, "results": rows}, indent=1, default=repr))

    t0 = time.monotonic()
    rows = earlier + (run_all(files, args, lambda new: save(earlier + new)) if files else [])
    env["search_s"] = round(time.monotonic() - t0, 1)
    if DEVICE == "cuda":
        env["device"] = torch.cuda.get_device_name()
    if not args.no_referee:
        judge(rows, args)
    env["wall_s"] = round(time.monotonic() - t0, 1)
    save(rows)
    print(f"\n{json.dumps({k: v for k, v in env.items() if k != 'files'})}\n")
    print(report(rows, args.precision))


if __name__ == "__main__":
    main()
