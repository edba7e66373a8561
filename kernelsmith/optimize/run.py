"""`kernelsmith optimize`: extract a model's top parts, evolve each, assemble `optimized.py`, judge it.

Layout of DIR: `request.json` (the model file's hash and the settings: what a re-run must match), `extract/`
(`kernelsmith extract`'s output), `parts/NN_name/` (an ordinary evolve run dir per part), `optimized.py`,
`verdict.json` (the referee's end-to-end verdict), `optimize.json` and `optimize.md` (the report).

The orchestrator runs no model or program code: extraction, the check and timing of the assembled model
(`optimize/worker.py`) and the referee's evaluations all run in sandbox children; here are only files, data and
text (`assemble.py`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.optimize.assemble import AssembleError, Part, render_file, set_swapped
from kernelsmith.task import Task
from kernelsmith.workshop.config import MAY_CHANGE_ON_RESUME, RunConfig

REQUEST, REPORT, REPORT_MD, VERDICT, OPTIMIZED = "request.json", "optimize.json", "optimize.md", "verdict.json", \
    "optimized.py"
SWAP_RULES = ("faster", "correct")


class OptimizeError(ValueError):
    """An optimize that cannot go on: the message names the file or setting. `kind`: changed (DIR holds another
    model or settings), model_failed (the model's own failure), bad_input, optimize_failed."""

    def __init__(self, message: str, file: str | Path | None = None, kind: str = "bad_input", hint: str = ""):
        super().__init__(message)
        self.file = str(file) if file is not None else None
        self.kind = kind
        self.hint = hint


@dataclass
class OptimizeOptions:
    top: int = 3
    swap: str = "faster"  # faster: a correct winner whose speedup interval lies above 1; correct: any correct one
    extract_timeout_s: float = 600.0
    measure_timeout_s: float = 600.0
    compile_baseline: bool = True  # on a GPU, also time torch.compile of the model
    notes: list[str] = field(default_factory=list)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def _request(task: Task, config: RunConfig, opts: OptimizeOptions) -> dict[str, Any]:
    evolve = config.model_dump(mode="json", exclude={"task", "run_dir", "overrides"})
    return {"model_file": str(Path(task.path).resolve()), "model_sha256": digest(task.original_source),
            "overrides": task.overrides, "device": config.device, "top": opts.top, "swap": opts.swap,
            "evolve": evolve}


def check_request(run_dir: Path, new: dict[str, Any]) -> dict[str, Any]:
    """The evolve settings that changed since DIR was started and may change ({key: [was, now]}); OptimizeError
    (kind `changed`) when the model file or any other setting differs."""
    path = run_dir / REQUEST
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise OptimizeError(f"{path}: unreadable ({exc}); choose a new --run-dir", path, "changed") from None
    if old.get("model_sha256") != new["model_sha256"]:
        raise OptimizeError(f"{new['model_file']}: the model file changed since {run_dir} was started (it was "
                            f"{old.get('model_file')}, sha256 {str(old.get('model_sha256'))[:12]}…); choose a new "
                            "--run-dir", new["model_file"], "changed")
    diffs = [f"{k} was {old.get(k)!r}, now {new[k]!r}" for k in ("overrides", "device", "top")
             if old.get(k) != new[k]]
    changed: dict[str, Any] = {}  # --swap may change: it only chooses among the same winners
    for k, v in new["evolve"].items():
        was = (old.get("evolve") or {}).get(k)
        if was != v:
            if k in MAY_CHANGE_ON_RESUME:
                changed[k] = [was, v]
            else:
                diffs.append(f"{k} was {was!r}, now {v!r}")
    if diffs:
        raise OptimizeError(f"{run_dir}: started with other settings ({'; '.join(diffs)}); re-run it with the same "
                            f"ones (only {', '.join(MAY_CHANGE_ON_RESUME)} may change) or choose a new --run-dir",
                            path, "changed")
    return changed


def _say(say: Callable[[str], None] | None, text: str) -> None:
    if say is not None:
        say(text)


def optimize(model_file: str | Path, config: RunConfig, opts: OptimizeOptions,
             say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run (or continue) an optimize in `config.run_dir`; returns the report written to `optimize.json`.
    `config` holds the evolve settings every part runs with (its `task` and `run_dir` are each part's)."""
    from kernelsmith.workshop.run import RunLock

    if opts.swap not in SWAP_RULES:
        raise OptimizeError(f"--swap {opts.swap!r}: expected one of {', '.join(SWAP_RULES)}", kind="bad_option")
    task = Task.load(model_file, config.overrides, device=config.device)
    run_dir = Path(config.run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise OptimizeError(f"{run_dir}: --run-dir is not a directory", run_dir, "bad_input")
    request = _request(task, config, opts)
    changed: dict[str, Any] = {}
    if (run_dir / REQUEST).exists():
        changed = check_request(run_dir, request)
    elif run_dir.is_dir() and any(run_dir.iterdir()):
        raise OptimizeError(f"{run_dir}: not empty and not an optimize dir (no {REQUEST}); choose a new --run-dir",
                            run_dir, "bad_input")
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir)
    try:
        if not (run_dir / REQUEST).exists():
            _write_json(run_dir / REQUEST, request)
        elif changed or json.loads((run_dir / REQUEST).read_text()).get("swap") != opts.swap:
            _write_json(run_dir / REQUEST, request)
        return _optimize_locked(task, config, opts, run_dir, changed, say)
    except OptimizeError:
        if created and not (run_dir / "parts").exists():  # failed in extraction: nothing to continue, nothing kept
            lock.release()
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    finally:
        lock.release()


def _extract(task: Task, config: RunConfig, opts: OptimizeOptions, run_dir: Path,
             say: Callable[[str], None] | None) -> dict[str, Any]:
    from kernelsmith.extract.model import ExtractError, ExtractOptions, extract

    out = run_dir / "extract"
    done = out / "extract.json"
    if done.exists():
        try:
            report = json.loads(done.read_text())
            if report.get("model_sha256") == digest(task.original_source):
                _say(say, f"extract: reused {done}")
                return report
        except (OSError, ValueError):
            pass
    _say(say, f"extract: {task.path} on {config.device}")
    try:
        report = extract(task.path, out, ExtractOptions(device=config.device, top=opts.top,
                                                       overrides=dict(task.overrides),
                                                       timeout_s=opts.extract_timeout_s))
    except ExtractError as exc:
        raise OptimizeError(str(exc), exc.file, exc.kind, exc.hint) from None
    report["model_sha256"] = digest(task.original_source)  # marks a finished extraction of this very file
    _write_json(done, report)
    return report


def _part_dirs(run_dir: Path, extracted: dict[str, Any]) -> list[tuple[dict[str, Any], Path]]:
    return [(t, run_dir / "parts" / f"{t['rank']:02d}_{t['name']}") for t in extracted.get("tasks", [])]


def _finished(part_dir: Path, rounds: int) -> bool:
    try:
        summary = json.loads((part_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return int(summary.get("rounds_done") or 0) >= rounds and not summary.get("stopped")


def _evolve_parts(config: RunConfig, run_dir: Path, extracted: dict[str, Any], changed: dict[str, Any],
                  say: Callable[[str], None] | None) -> dict[str, dict[str, Any]]:
    """Each part's evolve run, in parallel through one pool; finished parts are not run again, interrupted ones
    resume. Returns {part dir name: {"status": finished|skipped|failed, ...}}."""
    from kernelsmith.candidate import Candidate
    from kernelsmith.referee.verdict import Verdict
    from kernelsmith.settings import EvalRequest
    from kernelsmith.workshop.run import default_eval_workers, evolve

    todo, outcome = [], {}
    for t, part_dir in _part_dirs(run_dir, extracted):
        if not t.get("check", {}).get("ok"):
            outcome[part_dir.name] = {"status": "skipped", "reason": "the extracted task does not match the model"}
        elif "site" not in t or ("graph" not in extracted and t["site"].get("kind") != "module"):
            outcome[part_dir.name] = {"status": "skipped",
                                      "reason": "not placed in the model's graph (fx could not trace the model: "
                                                + str(extracted.get("graph_note") or "hooks") + ")"}
        elif _finished(part_dir, config.rounds):
            outcome[part_dir.name] = {"status": "finished", "reused": True}
        else:
            todo.append((t, part_dir))
    if not todo:
        return outcome
    workers = config.eval_workers or default_eval_workers(config.model_copy(update={"population": 1024}))
    # The pool places work but does not bound it: every part may use all `workers` slots, the semaphore keeps the
    # parts together within them (a part that is proposing leaves its slots to the others).
    slots = threading.BoundedSemaphore(workers)
    alone = threading.Lock()  # a part judged one evaluation at a time holds every slot, one such part at a time
    pool = None
    if not config.referee_url:
        from kernelsmith.referee.pool import LocalPool, RequestError

        try:
            pool = LocalPool(config.device, slots_per_gpu=workers, cpu_slots=workers)
        except RequestError as exc:
            raise OptimizeError(f"setting 'device': {exc}", kind="bad_option") from None

    def one(t: dict[str, Any], part_dir: Path) -> dict[str, Any]:
        task = Task.load(run_dir / "extract" / t["file"], device=config.device)
        cfg = config.model_copy(update={"task": task.path, "run_dir": part_dir, "overrides": {},
                                        "eval_workers": config.eval_workers or workers})
        judge = judge_alone = None
        if pool is not None:
            settings = cfg.eval_settings()

            def judged(candidate: Candidate) -> Verdict:
                return Verdict.coerce(pool.run(EvalRequest(task_source=task.source, task_name=task.name,
                                                           candidate_source=candidate.source, options=settings)))

            def judge(candidate: Candidate) -> Verdict:
                with slots:
                    return judged(candidate)

            def judge_alone(candidate: Candidate) -> Verdict:
                with alone, ExitStack() as held:
                    for _ in range(workers):
                        held.enter_context(slots)
                    return judged(candidate)
        resume = (part_dir / "run.db").exists()
        _say(say, f"part {part_dir.name}: {'resuming' if resume else 'evolving'} ({cfg.rounds} rounds × "
                  f"{cfg.population})")
        try:
            summary = evolve(cfg, resume=resume, judge=judge, changed=changed if resume else None)
            if summary.get("task_failure"):
                # The part's task failed while nothing was correct yet. A part runs at the model's real shapes,
                # beside every other evaluation in flight: the likeliest cause is memory or time they held, so
                # once more with nothing else judged at the same time.
                _say(say, f"part {part_dir.name}: {summary.get('stopped')}; once more, one evaluation at a time")
                summary = evolve(cfg, resume=True, judge=judge_alone, changed=None)
        except Exception as exc:  # noqa: BLE001 - one part's failure is its outcome; the others go on
            _say(say, f"part {part_dir.name}: failed: {exc}")
            return {"status": "failed", "reason": " ".join(str(exc).split())[:400]}
        if summary.get("stopped"):  # resumed by the next optimize of this dir; the report says why it stopped
            _say(say, f"part {part_dir.name}: stopped: {summary['stopped']}")
            return {"status": "stopped", "reason": " ".join(f"stopped: {summary['stopped']}".split())[:400]}
        _say(say, f"part {part_dir.name}: best {summary.get('best_id')} ({summary.get('best_status')}"
                  + (f", {summary['best_speedup']:.3f}×" if summary.get("best_speedup") else "") + ")")
        return {"status": "finished", "reused": False}

    with ThreadPoolExecutor(max_workers=len(todo)) as ex:
        futures = {part_dir.name: ex.submit(one, t, part_dir) for t, part_dir in todo}
        for name, fut in futures.items():
            outcome[name] = fut.result()
    return outcome


def _winner(part_dir: Path) -> dict[str, Any]:
    """The part's best correct program and its verdict, read through the run record (never executed here)."""
    from kernelsmith.export import ExportError
    from kernelsmith.export.package import source_from_run

    try:
        src = source_from_run(part_dir)
    except ExportError as exc:
        return {"correct": False, "reason": str(exc)}
    return {"correct": True, "program": src.program, "code": src.program_source, "verdict": src.verdict}


def faster(verdict: dict[str, Any]) -> bool:
    """Faster beyond its interval: the lower end of the speedup's 95% interval is above 1."""
    ci = verdict.get("speedup_ci")
    return isinstance(ci, (list, tuple)) and len(ci) == 2 and isinstance(ci[0], (int, float)) and ci[0] > 1.0


def _measure(task: Task, text: str, parts: list[int], config: RunConfig, opts: OptimizeOptions) -> dict[str, Any]:
    """The worker's check and timing of `text` (every part in `parts` switched on), in a sandbox."""
    from kernelsmith.referee.sandbox import run_job

    job = {"source": task.source, "filename": str(task.path), "optimized": set_swapped(text, parts),
           "device": config.device, "parts": parts}
    data, outcome, log = run_job("kernelsmith.optimize.worker", job, config.device, opts.measure_timeout_s,
                                 gpu=0, report_limit=16 << 20)
    if data is None:
        why = "timed out" if outcome.timed_out else "ran out of memory" if outcome.memory_exceeded else \
            (outcome.signal_name or f"exit code {outcome.returncode}")
        return {"ok": False, "error": f"the check of optimized.py ended ({why}): {' '.join(log.split())[-300:]}"}
    return data


def _judge(task: Task, text: str, config: RunConfig) -> dict[str, Any]:
    """The referee's verdict on `optimized.py` as a candidate for the model (KernelBench's rule, `lenient`: the
    model's own ops stay torch operators), through the pool as `kernelsmith eval` and evolve use it."""
    from kernelsmith.settings import EvalRequest

    settings = config.eval_settings().model_copy(update={"policy": "lenient"})
    request = EvalRequest(task_source=task.source, task_name=task.name, candidate_source=text, options=settings)
    if config.referee_url:
        from kernelsmith.referee.client import RefereeClient

        client = RefereeClient(config.referee_url, os.environ.get(config.referee_token_env) or None,
                               timeout_s=config.eval_timeout_s + 60)
        return dict(client.evaluate_many([request.to_dict()], timeout_s=config.eval_timeout_s * 4 + 600)[0])
    from kernelsmith.referee.pool import LocalPool

    return LocalPool(config.device, slots_per_gpu=1, cpu_slots=1, warm=0).run(request)


def _optimize_locked(task: Task, config: RunConfig, opts: OptimizeOptions, run_dir: Path, changed: dict[str, Any],
                     say: Callable[[str], None] | None) -> dict[str, Any]:
    t_start = time.monotonic()
    extracted = _extract(task, config, opts, run_dir, say)
    outcomes = _evolve_parts(config, run_dir, extracted, changed, say)
    graph = None
    if extracted.get("graph"):
        try:
            graph = json.loads((run_dir / "extract" / extracted["graph"]).read_text())
        except (OSError, ValueError):
            graph = None
    rows: list[dict[str, Any]] = []
    parts: list[Part] = []
    for i, (t, part_dir) in enumerate(_part_dirs(run_dir, extracted)):
        row: dict[str, Any] = {"part": i, "rank": t["rank"], "name": t["name"], "line": t.get("line"),
                               "code": t.get("code"), "task": f"extract/{t['file']}", "run_dir": f"parts/{part_dir.name}",
                               "share_before": t.get("share"), "ms_before": t.get("ms"), "swapped": False,
                               **outcomes.get(part_dir.name, {})}
        win = _winner(part_dir) if row.get("status") == "finished" else {"correct": False}
        row["winner"] = win.get("program")
        verdict = win.get("verdict") or {}
        row.update(speedup=verdict.get("speedup"), speedup_ci=verdict.get("speedup_ci"),
                   winner_status=verdict.get("status") if win.get("correct") else None)
        eligible = win.get("correct", False) and (opts.swap == "correct" or faster(verdict))
        if win.get("correct") and not eligible:
            row["reason"] = ("not faster beyond its interval" if verdict.get("speedup") is not None else
                             "speed not measured (cpu); --swap correct swaps correct winners in anyway")
        elif not win.get("correct") and "reason" not in row:
            row["reason"] = win.get("reason") or "no correct program"
        rows.append(row)
        if "site" in t:
            parts.append(Part(index=len(parts), name=t["name"], site=t["site"], code=win.get("code"),
                              swap=eligible, shapes=[[i["shape"], i["dtype"]] for i in t.get("inputs", [])]))
            row["part"] = parts[-1].index
        else:
            row["part"] = None
    report: dict[str, Any] = {"model": str(Path(task.path).resolve()), "model_sha256": digest(task.original_source),
                              "device": config.device, "swap_rule": opts.swap, "top": opts.top,
                              "overrides": task.overrides, "model_ms": extracted.get("model_ms"),
                              "optimized": None, "parts": rows}
    text = None
    if graph is None and not any(p.site.get("kind") == "module" for p in parts):
        report["note"] = "no optimized.py: " + str(extracted.get("graph_note") or "the model's graph is not known")
    else:  # the traced graph, or (fx could not trace the model) its module calls
        try:
            text, skipped = render_file(task.source, graph, parts)
        except AssembleError as exc:
            report["note"] = f"no optimized.py: {exc}"
            skipped = {}
        for row in rows:
            if row["part"] is not None and row["part"] in skipped:
                row["reason"] = skipped[row["part"]]
    measured: dict[str, Any] = {}
    if text is not None:
        eligible = [p.index for p in parts if p.swap and p.index not in skipped]
        measured = _measure(task, text, eligible, config, opts)
        swapped = measured.get("swapped", []) if measured.get("ok") else []
        text = set_swapped(text, swapped)
        by_part = measured.get("parts", {}) if measured.get("ok") else {}
        for row in rows:
            k = row["part"]
            if k is None:
                continue
            m = by_part.get(str(k), {})
            row["swapped"] = k in swapped
            if k in eligible and k not in swapped:
                row["reason"] = "in the assembled model: " + str(m.get("reason") or measured.get("error")
                                                                or "did not match")
            for key in ("before_ms", "after_ms"):
                if key in m:
                    row[f"measured_{key}"] = m[key]
            if "after_share" in m:
                row["share_after"] = m["after_share"]
            if "before_share" in m:
                row["share_before_measured"] = m["before_share"]
        if measured.get("ok"):
            report["measured"] = {k: measured.get(k) for k in ("model_ms", "new_ms", "reps")}
        else:
            report["measured"] = {"error": measured.get("error")}
        (run_dir / OPTIMIZED).write_text(text)
        report["optimized"] = OPTIMIZED
        report["optimized_sha256"] = digest(text)
        report["swapped"] = swapped
    report["verdict"] = _end_to_end(task, text, report, config, opts, run_dir, say)
    report["elapsed_s"] = round(time.monotonic() - t_start, 1)
    _write_json(run_dir / REPORT, report)
    (run_dir / REPORT_MD).write_text(markdown(report))
    return report


def _end_to_end(task: Task, text: str | None, report: dict[str, Any], config: RunConfig, opts: OptimizeOptions,
                run_dir: Path, say: Callable[[str], None] | None) -> dict[str, Any] | None:
    """The referee's verdict on optimized.py (reused when the file is the one judged before), and on a GPU its
    speedup against torch.compile of the model."""
    if text is None or not report.get("swapped"):
        (run_dir / VERDICT).unlink(missing_ok=True)
        return None
    try:
        old = json.loads((run_dir / VERDICT).read_text())
        if old.get("optimized_sha256") == digest(text):
            return old
    except (OSError, ValueError):
        pass
    _say(say, f"judging {run_dir / OPTIMIZED} against {task.path}")
    verdict = _judge(task, text, config)
    keep = {k: verdict.get(k) for k in ("status", "correct", "speedup", "speedup_ci", "ref_ms", "cand_ms",
                                        "max_abs_err", "max_rel_err", "device", "error", "guards", "versions")}
    keep["optimized_sha256"] = digest(text)
    keep["policy"] = "lenient"
    if config.device == "cuda" and opts.compile_baseline and keep.get("speedup"):
        from kernelsmith.bench.compile_timer import time_compile

        comp = time_compile(task.source, str(task.path), "cuda", precision=config.eval_settings().precision)
        keep["compile"] = comp
        if comp.get("compile_ratio"):
            keep["speedup_vs_compile"] = keep["speedup"] / comp["compile_ratio"]
    _write_json(run_dir / VERDICT, keep)
    return keep


def _pct(x: Any) -> str:
    return f"{100 * x:.1f}%" if isinstance(x, (int, float)) else "—"


def speedup_text(v: Any, ci: Any) -> str:
    if not isinstance(v, (int, float)):
        return "—"
    return f"{v:.3f}×" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else "")


def verdict_line(report: dict[str, Any]) -> str:
    v = report.get("verdict")
    if not v:
        why = report.get("note") or "no part was swapped in: optimized.py runs the model's own ops"
        return f"end to end: not judged ({why})"
    if not v.get("correct"):
        return f"end to end: {v.get('status')} ({str(v.get('error') or '')[:200]})"
    speed = speedup_text(v.get("speedup"), v.get("speedup_ci"))
    line = f"end to end: correct, {speed} vs eager" if v.get("speedup") else \
        "end to end: correct (speed not measured on the cpu)"
    if v.get("speedup_vs_compile"):
        line += f", {v['speedup_vs_compile']:.3f}× vs torch.compile"
    elif isinstance(v.get("compile"), dict) and v["compile"].get("error"):
        line += f" (torch.compile not timed: {v['compile']['error'][:100]})"
    return line


def markdown(report: dict[str, Any]) -> str:
    """The report as a short markdown table: per part, time share before and after, speedup, swapped or why not."""
    lines = [f"# optimize: {report['model']} ({report['device']})", "",
             "| rank | part | line | share before | share after | part speedup | swapped |",
             "|---|---|---|---|---|---|---|"]
    for r in report["parts"]:
        swapped = "yes" if r.get("swapped") else f"no: {r.get('reason') or r.get('status') or ''}"
        lines.append(f"| {r['rank']} | {r['name']} | {r.get('line') or '—'} | {_pct(r.get('share_before'))} | "
                     f"{_pct(r.get('share_after'))} | {speedup_text(r.get('speedup'), r.get('speedup_ci'))} | "
                     f"{swapped.replace('|', '/')} |")
    lines += ["", verdict_line(report)]
    m = report.get("measured") or {}
    if m.get("model_ms") is not None:
        lines.append(f"measured in the sandbox: model {m['model_ms']} ms, optimized {m['new_ms']} ms "
                     f"({m['reps']} runs{', interpreter: not a speed' if report['device'] == 'cpu' else ''})")
    if report.get("optimized"):
        lines.append(f"optimized model: {report['optimized']} (parts swapped in: {report.get('swapped') or 'none'})")
    return "\n".join(lines) + "\n"
