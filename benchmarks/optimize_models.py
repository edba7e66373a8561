"""Issue 18 end to end: from a user's model to a faster model (`kernelsmith optimize`, then `export`).

    python benchmarks/optimize_models.py --kb .kb/KernelBench --device cuda --out $OUT/optimize_models.json
    python benchmarks/optimize_models.py MODEL.py ... --device cuda [--rounds 2 --population 4 --top 2]
        [--set [STEM:]NAME=VALUE ...] [--model-timeout-s 150] [--deadline-s 460] [--work DIR] --out X.json
    python benchmarks/optimize_models.py benchmarks/models/transformer_mlp_block.py --device cpu \\
        --rounds 1 --population 1 --top 1 --set batch_size=2 --set seq_len=8 --set dim=32 --out /tmp/om.json

The last is the CPU smoke test. Models: the files given, else our own `benchmarks/models/
transformer_mlp_block.py` and KernelBench's level-3 `1_MLP`, `8_ResNetBasicBlock` and `44_MiniGPTBlock` (under
`--kb`, as shipped). `--set NAME=VALUE` applies to every model defining NAME at module level, `--set
STEM:NAME=VALUE` to that model only (STEM: the file's name without `.py`). Per model, under `--work` (default:
a fresh temp dir):

1. `python -m kernelsmith.cli optimize MODEL --run-dir STEM/run --device D --proposer offline ...` (the CLI
   run as a module: no installed console script is needed), killed with its sandboxes past its time (the
   lesser of `--model-timeout-s` and a fair share of what is left of `--deadline-s`); `--swap correct` on the
   CPU, where nothing is timed;
2. reads `STEM/run/optimize.json`: parts swapped, per-part share before and after, the referee's end-to-end
   speedup with its 95% interval and, on a GPU, against torch.compile;
3. `kernelsmith export STEM/run --out STEM/pkg/ks_STEM`, then the package's own `pytest`, run from the folder
   holding it with this repo off the path (the package must work without kernelsmith);
4. times eager, `torch.compile(model)` and the assembled `optimized.py`'s ModelNew side by side in one process
   on the same inputs and weights (`triton.testing.do_bench` medians, L2 flushed; fp32 at the referee's
   default precision). That process is a child of this script, one per model: a faulting kernel poisons a
   CUDA context for good, so one model's failure cannot lose the others. On the CPU: a correctness check and a
   wall clock of the interpreter (not a speed), no torch.compile.

Rows go to `--out` as each step ends; at the end a markdown table (also `--out` with `.md`) and an env line.
Exit code 0 when every model was swapped, judged correct end to end and its package's test passed; else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OWN_MODEL = ROOT / "benchmarks" / "models" / "transformer_mlp_block.py"
KB_MODELS = ("level3/1_MLP.py", "level3/8_ResNetBasicBlock.py", "level3/44_MiniGPTBlock.py")
TAIL = 1500  # characters of a step's log kept in the JSON
VERDICT_KEYS = ("status", "correct", "speedup", "speedup_ci", "ref_ms", "cand_ms", "max_abs_err",
                "speedup_vs_compile", "error", "device")
COMPILE_KEYS = ("eager_ms", "compile_ms", "compile_ratio", "compile_s", "method", "error")


def now() -> float:
    return time.monotonic()


def write_json(path: Path, data: Any) -> None:
    """Atomically, so a kill mid-write leaves the previous rows readable."""
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def tail(text: str, n: int = TAIL) -> str:
    return text[-n:] if len(text) > n else text


def child_env(with_repo: bool = True) -> dict[str, str]:
    """This repo on PYTHONPATH (the CLI and its sandboxes import kernelsmith from it), or off it (the
    package's test must not lean on kernelsmith)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != ROOT]
    env["PYTHONPATH"] = os.pathsep.join(([str(ROOT)] if with_repo else []) + parts)
    return env


def run_step(cmd: list[str], log: Path, timeout_s: float, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `cmd` in its own session with output to `log`; past `timeout_s` SIGINT (the CLI's own stop, which
    keeps the run dir resumable), then SIGKILL to the group (the sandboxes die with their parent)."""
    t0 = now()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=cwd or ROOT,
                                env=env or child_env(), start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except BaseException:  # this script stopped (SIGTERM, ^C): its child and the sandboxes go too, quickly
            kill_group(proc, grace_s=2.0)
            raise
    text = log.read_text(errors="replace")
    return {"rc": proc.returncode, "timed_out": timed_out, "wall_s": round(now() - t0, 1), "log": str(log),
            "log_tail": tail(text)}


def kill_group(proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
    for sig, grace in ((signal.SIGINT, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def model_files(args: argparse.Namespace) -> list[Path]:
    if args.models:
        return [Path(m).resolve() for m in args.models]
    kb = Path(args.kb).resolve()
    base = kb / "KernelBench" if (kb / "KernelBench" / "level3").is_dir() else kb
    return [OWN_MODEL] + [base / rel for rel in KB_MODELS]


def overrides_for(path: Path, sets: list[str], device: str) -> list[str]:
    """The `--set NAME=VALUE` pairs for `path`: scoped ones naming its stem, unscoped ones it has a constant
    for (read statically by kernelsmith's task loader, nothing run)."""
    from kernelsmith.task import Task

    try:
        constants = set(Task.load(path, device=device).constants)
    except Exception:  # noqa: BLE001 - the CLI says what is wrong with the file
        constants = set()
    out = []
    for pair in sets:
        scope, sep, rest = pair.partition(":")
        if sep and "=" not in scope:
            if scope == path.stem:
                out.append(rest)
        elif pair.partition("=")[0].strip() in constants:
            out.append(pair)
    return out


def summarize_report(report: dict[str, Any]) -> dict[str, Any]:
    """What the table and the issue need from optimize.json (the whole file stays in the run dir)."""
    v = report.get("verdict") or {}
    comp = v.get("compile") if isinstance(v.get("compile"), dict) else {}
    parts = [{k: p.get(k) for k in ("rank", "name", "line", "share_before", "share_after", "speedup",
                                    "speedup_ci", "swapped", "reason", "status", "winner")}
             for p in report.get("parts", [])]
    return {"swapped": [p["name"] for p in parts if p.get("swapped")], "parts": parts,
            "model_ms_extract": report.get("model_ms"), "measured": report.get("measured"),
            "note": report.get("note"), "elapsed_s": report.get("elapsed_s"),
            "verdict": {k: v.get(k) for k in VERDICT_KEYS},
            "referee_compile": {k: comp.get(k) for k in COMPILE_KEYS} if comp else None}


def package_name(stem: str) -> str:
    return "ks_" + re.sub(r"\W", "_", stem).lower()


def one_model(path: Path, args: argparse.Namespace, work: Path, budget_s: float, row: dict[str, Any],
              save: Any) -> None:
    """Steps 1-4 for one model, each recorded in `row` (and saved) as it ends; a failing step is its entry."""
    t0 = now()
    stem = path.stem
    mdir = work / stem
    mdir.mkdir(parents=True, exist_ok=True)
    run_dir = mdir / "run"
    sets = overrides_for(path, args.set or [], args.device)
    row.update(model=stem, file=str(path), overrides=sets, run_dir=str(run_dir))
    if not path.is_file():
        row["error"] = f"{path}: no such file"
        return
    swap = args.swap or ("correct" if args.device == "cpu" else "faster")
    cmd = [sys.executable, "-m", "kernelsmith.cli", "optimize", str(path), "--run-dir", str(run_dir),
           "--device", args.device, "--proposer", args.proposer, "--rounds", str(args.rounds),
           "--population", str(args.population), "--top", str(args.top), "--swap", swap,
           *[a for s in sets for a in ("--set", s)], *args.cli_arg]
    limit = min(args.model_timeout_s, budget_s)
    row["optimize"] = {"cmd": " ".join(cmd), "timeout_s": round(limit, 1),
                       **run_step(cmd, mdir / "optimize.log", limit)}
    save()
    report: dict[str, Any] = {}
    try:
        report = json.loads((run_dir / "optimize.json").read_text())
        row["report"] = summarize_report(report)
    except (OSError, ValueError) as exc:
        row["report"] = {"error": f"no optimize.json: {exc}"}
    save()
    left = lambda: budget_s + args.reserve_s - (now() - t0)  # noqa: E731 - the steps after optimize share it

    verdict = report.get("verdict") or {}
    pkg = mdir / "pkg" / package_name(stem)
    if report.get("swapped") and verdict.get("correct"):
        (mdir / "pkg").mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "kernelsmith.cli", "export", str(run_dir), "--out", str(pkg)]
        row["export"] = {"cmd": " ".join(cmd),
                         **run_step(cmd, mdir / "export.log", min(120.0, max(10.0, left())))}
        save()
        if row["export"]["rc"] == 0:
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                   str(pkg.parent), pkg.name]
            res = run_step(cmd, mdir / "package_test.log", min(args.test_timeout_s, max(10.0, left())),
                           cwd=pkg.parent, env=child_env(with_repo=False))
            last = [ln for ln in res["log_tail"].splitlines() if re.search(r"passed|failed|error", ln)]
            row["package_test"] = {"cmd": f"cd {pkg.parent} && python " + " ".join(cmd[1:]),
                                   "passed": res["rc"] == 0, "summary": last[-1] if last else "", **res}
    else:
        if not report:
            why = "optimize did not finish"
        else:
            why = report.get("note") or ("no part was swapped in" if not report.get("swapped") else
                                         f"end to end {verdict.get('status')}")
        row["export"] = {"skipped": why}
    save()

    job = {"model": str(path), "overrides": sets, "device": args.device, "optimized": None,
           "compile": args.device == "cuda" and not args.no_compile, "warmup_ms": args.warmup_ms,
           "rep_ms": args.rep_ms}
    if report.get("optimized") and (run_dir / report["optimized"]).is_file():
        job["optimized"] = str(run_dir / report["optimized"])
    (mdir / "time_job.json").write_text(json.dumps(job))
    result = mdir / "time_job.result.json"
    result.unlink(missing_ok=True)  # a previous run's, in a reused --work
    res = run_step([sys.executable, str(Path(__file__).resolve()), "--time-one", str(mdir / "time_job.json")],
                   mdir / "time.log", min(args.time_timeout_s, max(15.0, left())))
    try:
        row["timing"] = json.loads(result.read_text())  # what it measured before any failure
    except (OSError, ValueError):
        row["timing"] = {"error": "the timing child ended without a result"}
    if res["rc"] != 0:
        row["timing"]["child"] = res
    row["wall_s"] = round(now() - t0, 1)


def time_one(job_path: Path) -> None:
    """The timing child: eager, ModelNew and torch.compile of one model in this one process, same inputs and
    weights. Each measurement is its own try so a failing one leaves the others."""
    job = json.loads(job_path.read_text())
    device = job["device"]
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: kernels run interpreted
    sys.path.insert(0, str(ROOT))
    out_path = job_path.with_name("time_job.result.json")
    result: dict[str, Any] = {"device": device}

    def save() -> None:
        write_json(out_path, result)

    import statistics

    import torch

    from kernelsmith.referee.compare import compare_outputs
    from kernelsmith.referee.worker import set_precision
    from kernelsmith.settings import DEFAULT_PRECISION
    from kernelsmith.task import Task, load_module, parse_overrides

    if device == "cuda":
        result["gpu"] = torch.cuda.get_device_name(0)
        set_precision(DEFAULT_PRECISION)  # the referee's baselines: fp32 dots in full fp32, cuDNN's tf32 off
        result["precision"] = DEFAULT_PRECISION
    torch.set_grad_enabled(False)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    def bench(fn: Any) -> float:
        if device == "cuda":
            import triton.testing

            return float(triton.testing.do_bench(fn, warmup=job["warmup_ms"], rep=job["rep_ms"],
                                                 return_mode="median"))
        times = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e3)
        return statistics.median(times)

    task = Task.load(job["model"], parse_overrides(job["overrides"]), device=device)
    mod = load_module(task.source, str(task.path), "om_model")
    torch.manual_seed(0)
    init = list(mod.get_init_inputs())
    with torch.device(device):  # weights made where they run: 1_MLP's 671M parameters take long on the CPU
        model = mod.Model(*init).eval()
    torch.manual_seed(1)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    ref = model(*inputs)

    def flat(o: Any) -> list[Any]:
        return list(o) if isinstance(o, (tuple, list)) else [o]

    result["eager_ms"] = round(bench(lambda: model(*inputs)), 4)
    save()
    new = None
    if job["optimized"]:
        try:
            path = Path(job["optimized"])
            new_mod = load_module(path.read_text(), str(path), "om_optimized")  # Triton reads the real file
            torch.manual_seed(0)  # the same init as `model`, then its very weights
            with torch.device(device):
                new = new_mod.ModelNew(*init).eval()
            keys = new.load_state_dict(model.state_dict(), strict=False)
            if keys.missing_keys or keys.unexpected_keys:
                result["ours_state_note"] = (f"missing {keys.missing_keys[:5]}, unexpected "
                                             f"{keys.unexpected_keys[:5]}: those keep the same-seed init")
            cmp = compare_outputs(flat(new(*inputs)), flat(ref))
            result.update(ours_correct=bool(cmp.ok), ours_max_abs_err=cmp.max_abs_err, ours_reason=cmp.reason)
            result["ours_ms"] = round(bench(lambda: new(*inputs)), 4)
        except Exception as exc:  # noqa: BLE001 - recorded; eager and compile still go on
            result["ours_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        save()
    if job["compile"]:
        try:
            compiled = torch.compile(model)
            t = time.perf_counter()
            compiled(*inputs)
            sync()
            result["compile_s"] = round(time.perf_counter() - t, 1)
            result["compile_ms"] = round(bench(lambda: compiled(*inputs)), 4)
        except Exception as exc:  # noqa: BLE001 - as above
            result["compile_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        save()
        result["eager_ms_again"] = round(bench(lambda: model(*inputs)), 4)  # drift check: eager again, later
    for key in ("compile", "ours"):
        if result.get(f"{key}_ms"):
            result[f"{key}_speedup"] = round(result["eager_ms"] / result[f"{key}_ms"], 4)
    result["method"] = ("triton.testing.do_bench median" if device == "cuda" else
                        "wall clock; ours through Triton's interpreter: not a speed")
    save()


def env_line(device: str) -> dict[str, Any]:
    """Versions from a child (this process never touches the GPU) and the date."""
    code = ("import json, sys, torch, triton; print(json.dumps({'python': sys.version.split()[0], 'torch': "
            "torch.__version__, 'triton': triton.__version__, 'gpu': torch.cuda.get_device_name(0) "
            "if torch.cuda.is_available() else None}))")
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        env = json.loads(proc.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        env = {"python": platform.python_version(), "error": str(exc)}
    env.update(device=device, date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               host=platform.node(), cpus=os.cpu_count())
    return env


def fmt_x(v: Any, ci: Any = None) -> str:
    if not isinstance(v, (int, float)):
        return "—"
    s = f"{v:.3f}×"
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(c, (int, float)) for c in ci):
        s += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    return s


def fmt_pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, (int, float)) else "—"


def table(results: dict[str, Any]) -> str:
    """The summary table, the parts table and the env line, in markdown."""
    lines = ["| model | parts swapped | referee e2e (95% CI) | referee vs compile | eager ms | compile × | "
             "ours × | package test | wall s |", "|---|---|---|---|---|---|---|---|---|"]
    parts = ["| model | part | share before | share after | part speedup | swapped |",
             "|---|---|---|---|---|---|"]
    for r in results["models"]:
        rep = r.get("report") or {}
        v = rep.get("verdict") or {}
        tm = r.get("timing") or {}
        opt = r.get("optimize") or {}
        e2e = fmt_x(v.get("speedup"), v.get("speedup_ci")) if v.get("speedup") else (
            "correct (cpu: not timed)" if v.get("correct") else
            (v.get("status") or ("timed out" if opt.get("timed_out") else r.get("error") or rep.get("error")
                                 or "not judged")))
        test = r.get("package_test") or {}
        test_s = ("pass" if test.get("passed") else "FAIL") if test else \
            f"— ({(r.get('export') or {}).get('skipped') or 'not run'})"[:60]
        cpu = tm.get("device") == "cpu"
        ours = "correct (interp.)" if cpu and tm.get("ours_correct") else fmt_x(tm.get("ours_speedup"))
        if tm.get("ours_correct") is False:
            ours += " (wrong)"
        elif tm.get("ours_error"):
            ours = "error"
        if tm.get("ours_ms") and not rep.get("swapped"):
            ours += " (none swapped)"
        eager = f"{tm['eager_ms']:.3f}" if isinstance(tm.get("eager_ms"), (int, float)) else "—"
        if cpu and eager != "—":
            eager += " (cpu)"
        lines.append(f"| {r.get('model')} | {', '.join(rep.get('swapped') or []) or '—'} | {e2e} | "
                     f"{fmt_x(v.get('speedup_vs_compile'))} | {eager} | {fmt_x(tm.get('compile_speedup'))} | "
                     f"{ours} | {test_s} | {r.get('wall_s', '—')} |".replace("\n", " "))
        for p in rep.get("parts") or []:
            why = "yes" if p.get("swapped") else f"no: {p.get('reason') or p.get('status') or ''}"[:80]
            parts.append(f"| {r.get('model')} | {p.get('name')} | {fmt_pct(p.get('share_before'))} | "
                         f"{fmt_pct(p.get('share_after'))} | "
                         f"{fmt_x(p.get('speedup'), p.get('speedup_ci'))} | {why.replace('|', '/')} |")
    e = results.get("env") or {}
    a = results["args"]
    env = (f"env: {e.get('gpu') or 'no GPU'} ({e.get('device')}), torch {e.get('torch')}, "
           f"triton {e.get('triton')}, python {e.get('python')}, {e.get('date')}; rounds {a['rounds']}, "
           f"population {a['population']}, top {a['top']}, proposer {a['proposer']}")
    return "\n".join(lines + [""] + parts + ["", env]) + "\n"


def progress_line(row: dict[str, Any]) -> str:
    rep, tm = row.get("report") or {}, row.get("timing") or {}
    test = (row.get("package_test") or {}).get("summary") or (row.get("export") or {}).get("skipped")
    keys = ("eager_ms", "compile_ms", "ours_ms", "ours_correct", "ours_error", "compile_error")
    timing = {k: tm[k] for k in keys if k in tm}
    return (f"swapped {rep.get('swapped')}, e2e {fmt_x((rep.get('verdict') or {}).get('speedup'))}, timing "
            f"{timing or tm.get('error')}, package test: {test}, {row.get('wall_s')} s"
            + (f", error: {row['error']}" if row.get("error") else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help="model files (default: our own + three KernelBench level-3)")
    ap.add_argument("--kb", default=str(ROOT / ".kb" / "KernelBench"), help="KernelBench dir holding level3/")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--proposer", default="offline")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--top", type=int, default=2)
    ap.add_argument("--swap", choices=("faster", "correct"), default=None,
                    help="default: correct on cpu, else faster")
    ap.add_argument("--set", action="append", metavar="[STEM:]NAME=VALUE", help="a model constant override")
    ap.add_argument("--cli-arg", action="append", default=[],
                    help="passed to `optimize` as is, e.g. --cli-arg=--timeout=300")
    ap.add_argument("--model-timeout-s", type=float, default=150.0, help="optimize's wall clock per model")
    ap.add_argument("--deadline-s", type=float, default=460.0, help="the whole run; models get fair shares")
    ap.add_argument("--reserve-s", type=float, default=50.0, help="per model, kept for export, test, timing")
    ap.add_argument("--test-timeout-s", type=float, default=120.0)
    ap.add_argument("--time-timeout-s", type=float, default=120.0)
    ap.add_argument("--warmup-ms", type=int, default=25)
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--no-compile", action="store_true", help="do not time torch.compile in step 4")
    ap.add_argument("--work", default="", help="where run dirs and packages go (default: a new temp dir); "
                                               "an existing one continues its optimizes")
    ap.add_argument("--out", default="optimize_models.json")
    ap.add_argument("--time-one", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.time_one:
        time_one(Path(args.time_one))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # an outer `timeout`: still write the table
    sys.path.insert(0, str(ROOT))
    start = now()
    work = Path(args.work).resolve() if args.work else Path(tempfile.mkdtemp(prefix="optimize_models-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out).resolve()
    files = model_files(args)
    results: dict[str, Any] = {"issue": 18, "args": {k: v for k, v in vars(args).items() if k != "time_one"},
                               "work": str(work), "env": env_line(args.device), "models": []}
    print(f"work dir {work}; models: {', '.join(f.stem for f in files)}", flush=True)

    def save() -> None:
        results["elapsed_s"] = round(now() - start, 1)
        write_json(out, results)

    save()
    try:
        for i, path in enumerate(files):
            row: dict[str, Any] = {"model": path.stem}
            results["models"].append(row)
            left = args.deadline_s - (now() - start)
            share = left / (len(files) - i) - args.reserve_s
            if share < 20:
                row["error"] = f"skipped: {left:.0f} s left of --deadline-s"
                save()
                continue
            limit = min(share, args.model_timeout_s)
            print(f"[{i + 1}/{len(files)}] {path.stem}: optimize (at most {limit:.0f} s)", flush=True)
            try:
                one_model(path, args, work, share, row, save)
            except Exception as exc:  # noqa: BLE001 - one model's failure is its row; the others go on
                row["error"] = f"{type(exc).__name__}: {exc}"
            save()
            print("    " + progress_line(row), flush=True)
    finally:
        save()
        md = table(results)
        out.with_suffix(".md").write_text(md)
        print("\n" + md, flush=True)
    ok = all(((r.get("report") or {}).get("verdict") or {}).get("correct") and
             (r.get("package_test") or {}).get("passed") for r in results["models"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
