"""KernelBench as shipped (issue 17): can every size constant be `--set`, and what does the offline seed do?

    python benchmarks/kernelbench_sweep.py KERNELBENCH_DIR [--levels 1 2 3] [--timeout-s 60] [--jobs 2]
        [--out sweep.json] [--no-seed] [--no-shrink] [--only RNN LSTM GRU]

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
   halved while it is even and above 128 (`--no-shrink`: the shipped sizes), tuples element by element — those `Task.load` accepts are applied,
   and `generate_seed` runs on the CPU. Outcome: produced, refused (`SeedUnsupported`: its reason, whether
   it names a line of the task file), error (any other exception) or timeout; the time to the outcome.

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

import torch  # noqa: E402
import triton  # noqa: E402

from kernelsmith.task import Task, TaskError  # noqa: E402
from kernelsmith.workshop.offline.seed import SeedUnsupported, generate_seed  # noqa: E402

SHRINK_ABOVE = 128  # lower and image models downsample to nothing (MobileNet, ViT patches)
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


def shrink(v: Any) -> Any:
    if type(v) is int:
        while v > SHRINK_ABOVE and v % 2 == 0:
            v //= 2
        return v
    return type(v)(shrink(x) for x in v)


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


def run_seed(path: Path, source: str, shrinking: bool) -> dict[str, Any]:
    truth = top_level_values(source)
    roots = root_names(source)
    wanted = {k: shrink(v) for k, v in truth.items()
              if shrinking and k in roots and is_size(v) and shrink(v) != v}
    applied = {}
    for k, v in wanted.items():  # what this version's --set accepts
        try:
            Task.load(path, {k: v}, device="cpu")
            applied[k] = v
        except (TaskError, Exception):  # noqa: BLE001
            pass
    t0 = time.perf_counter()
    try:
        task = Task.load(path, applied, device="cpu")
    except TaskError as exc:  # refused before the seed (e.g. a module that is not installed): what a user sees
        return {"outcome": "refused", "reason": str(exc), "line": line_named(str(exc), path),
                "s": time.perf_counter() - t0, "shrunk": applied, "at": "Task.load"}
    try:
        result = generate_seed(task.source, filename=str(path))
        return {"outcome": "produced", "patterns": result.patterns, "s": time.perf_counter() - t0,
                "shrunk": applied, "not_shrunk": sorted(set(wanted) - set(applied))}
    except SeedUnsupported as exc:
        reason = str(exc)
        return {"outcome": "refused", "reason": reason, "line": line_named(reason, path),
                "s": time.perf_counter() - t0, "shrunk": applied, "not_shrunk": sorted(set(wanted) - set(applied))}
    except Exception as exc:  # noqa: BLE001
        return {"outcome": "error", "reason": f"{type(exc).__name__}: {exc}"[:300],
                "where": traceback.format_exc().strip().splitlines()[-3][:200], "s": time.perf_counter() - t0}


def child(path: Path, seed: bool, shrinking: bool, conn: Any) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    torch.set_num_threads(1)
    source = path.read_text()
    row: dict[str, Any] = {"set": check_set(path, source)}
    conn.send(row)
    if seed:
        row["seed"] = run_seed(path, source, shrinking)
        conn.send(row)
    conn.close()


def sweep(files: list[Path], seed: bool, shrinking: bool, timeout_s: float, jobs: int) -> dict[str, dict[str, Any]]:
    ctx = mp.get_context("fork")
    pending, running, rows = list(files), {}, {}
    while pending or running:
        while pending and len(running) < jobs:
            f = pending.pop(0)
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=child, args=(f, seed, shrinking, send), daemon=True)
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
                print(f"{f.parent.name}/{f.name}: {last.get('seed', {}).get('outcome', '-')} "
                      f"{len(last['set']['refused'])} refused", file=sys.stderr, flush=True)
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
            "refusals_raw_error_without_line": sum(
                (bool(re.search(r"\((\w+Error|\w+Exception): ", s.get("reason", ""))) or s["outcome"] == "error")
                and not s.get("line") for s in refusals),
        })
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kernelbench", type=Path, help="KernelBench's task folder (holding level1/, level2/, ...)")
    ap.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--timeout-s", type=float, default=60.0, help="per file (the --set check and the seed)")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 1)))
    ap.add_argument("--no-seed", action="store_true", help="only the --set check")
    ap.add_argument("--no-shrink", action="store_true", help="the seed at the shipped sizes")
    ap.add_argument("--only", nargs="*", default=[], help="file name substrings to keep (e.g. RNN LSTM GRU)")
    ap.add_argument("--out", type=Path, default=Path("kernelbench_sweep.json"))
    args = ap.parse_args()
    files = sorted(f for lv in args.levels for f in (args.kernelbench / f"level{lv}").glob("*.py"))
    if args.only:
        files = [f for f in files if any(o in f.name for o in args.only)]
    if not files:
        sys.exit(f"{args.kernelbench}: no level*/ task files")
    t0 = time.time()
    rows = sweep(files, not args.no_seed, not args.no_shrink, args.timeout_s, args.jobs)
    env = {"date": str(date.today()), "cpus": os.cpu_count(), "python": platform.python_version(),
           "torch": torch.__version__, "triton": triton.__version__, "command": " ".join(sys.argv),
           "wall_s": round(time.time() - t0, 1)}
    result = {"env": env, "summary": summary(rows), "rows": rows}
    args.out.write_text(json.dumps(result, indent=1, default=repr))
    print(json.dumps({"env": env, "summary": result["summary"]}, indent=1))


if __name__ == "__main__":
    main()
