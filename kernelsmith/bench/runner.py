"""`kernelsmith bench`: every task of a set, evaluated (given candidates) or evolved (a run dir per task).

OUT holds, as the bench goes:
- `bench.json`: the settings; a later run into the same OUT must use the same ones (it resumes);
- `results.jsonl`: one JSON row per finished task, appended (flushed and fsynced) as each task ends. A rerun
  skips every task with a row; a row with status `error` (the bench itself failed on that task, e.g. a crash in
  the workshop) is retried. An evolution interrupted mid-task resumes from its run dir (`--resume` semantics);
- `runs/levelN/TASK/` (evolve mode): each task's workshop run dir;
- at the end `metrics.json`, `metrics.csv` (per level and overall, against eager and torch.compile) and
  `tasks.csv` (one row per task).

A task with no candidate (eval mode) is a row with status `no_candidate`: it counts as not correct.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.backends import BACKEND_NAMES
from kernelsmith.bench.metrics import by_level, to_csv
from kernelsmith.bench.tasks import BenchInputError, BenchTask, candidate_for
from kernelsmith.settings import (
    DEFAULT_PRECISION,
    NUMERICS,
    PRECISIONS,
    EvalSettings,
    SettingsError,
    check_device,
)

NO_CANDIDATE = "no_candidate"
BAD_CANDIDATE = "bad_candidate"
BENCH_ERROR = "error"  # the bench failed on this task (not the candidate): retried on resume
NOT_MEASURED_CPU = "not measured (cpu: torch.compile is timed on cuda only)"
NOT_REQUESTED = "not requested (--against-compile)"
TASK_COLUMNS = ("task", "level", "status", "speedup", "speedup_ci", "speedup_vs_compile", "compile_ratio",
                "eager_ms", "compile_ms", "ref_ms", "cand_ms", "error", "guards", "candidate", "run_dir",
                "best_id", "programs", "tokens", "cost_usd", "elapsed_s")


@dataclass
class BenchSettings:
    mode: str = "eval"  # eval | evolve
    device: str = "cuda"
    backend: str = "triton"  # what the candidates are written in (kernelsmith.backends)
    policy: str = "strict"
    overrides: dict[str, Any] = field(default_factory=dict)
    candidates: str | None = None
    trials: int = 5
    timeout_s: float = 300.0
    against_compile: bool = False
    precision: str = DEFAULT_PRECISION  # fp32 dots of the generated code and of the baselines (EvalSettings)
    numerics: str = "tolerance"  # the referee's numerics policy (EvalSettings)
    # evolve mode
    rounds: int | None = None
    population: int | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    proposer: str | None = None
    config: str | None = None

    def validate(self) -> None:
        if self.mode not in ("eval", "evolve"):
            raise BenchInputError(f"--mode {self.mode!r}: expected eval or evolve")
        try:
            check_device(self.device, "--device")
        except ValueError as exc:
            raise BenchInputError(str(exc)) from None
        if self.backend not in BACKEND_NAMES:
            raise BenchInputError(f"--backend {self.backend!r}: expected one of {', '.join(BACKEND_NAMES)}")
        try:
            self.eval_settings()
        except SettingsError as exc:
            raise BenchInputError(str(exc)) from None
        if self.mode == "evolve":
            _run_precision(self)
        if self.mode == "eval" and not self.candidates:
            raise BenchInputError("--mode eval needs --candidates DIR (a folder of ModelNew files named like the "
                                  "tasks, e.g. solutions/)")
        if self.candidates and not Path(self.candidates).is_dir():
            raise BenchInputError(f"{self.candidates}: --candidates is not a directory")
        if self.config and not Path(self.config).is_file():
            raise BenchInputError(f"{self.config}: --config file not found")

    def eval_settings(self) -> EvalSettings:
        return EvalSettings(device=self.device, policy=self.policy, timeout_s=self.timeout_s, trials=self.trials,
                            backend=self.backend, precision=self.precision, numerics=self.numerics)

    def identity(self) -> dict[str, Any]:
        """What must not change between a bench and its resumption (results would not be comparable)."""
        d = asdict(self)
        for k in ("timeout_s", "api_key_env", "base_url"):
            d.pop(k)
        if d["candidates"]:
            d["candidates"] = str(Path(d["candidates"]).resolve())
        if d["config"]:
            d["config"] = str(Path(d["config"]).resolve())
        return d


class ResultLog:
    """`results.jsonl`: the finished tasks, one line each, durable as soon as `add` returns."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        if path.exists():
            text = path.read_text()
            if text and not text.endswith("\n"):  # a line cut short by a kill: the next row starts afresh
                with path.open("a") as f:
                    f.write("\n")
            for line in text.splitlines():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:  # a line cut short by a kill: that task is redone
                    continue
                if isinstance(row, dict) and "task" in row:
                    self.rows[row["task"]] = row

    def done(self, key: str) -> bool:
        row = self.rows.get(key)
        return row is not None and row.get("status") != BENCH_ERROR

    def add(self, row: dict[str, Any]) -> None:
        data = json.dumps(row, default=str)
        with self.path.open("a") as f:
            f.write(data + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.rows[row["task"]] = row


def open_out(out: Path, settings: BenchSettings) -> ResultLog:
    """Create OUT (or check that it holds a bench with the same settings) and load its finished tasks."""
    if out.exists() and not out.is_dir():
        raise BenchInputError(f"{out}: --out exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    meta = out / "bench.json"
    ident = settings.identity()
    if meta.exists():
        try:
            old = json.loads(meta.read_text()).get("settings", {})
            old.setdefault("backend", "triton")  # benches written before the setting existed were Triton
            old.setdefault("precision", DEFAULT_PRECISION)  # ... and judged by tolerance, baselines at torch's
            old.setdefault("numerics", "tolerance")  # defaults: resumable under the defaults
        except (json.JSONDecodeError, AttributeError):
            raise BenchInputError(f"{meta}: unreadable bench settings; use another --out") from None
        changed = sorted(k for k in set(old) | set(ident) if old.get(k) != ident.get(k))
        if changed:
            what = ", ".join(f"{k}: {old.get(k)!r} → {ident.get(k)!r}" for k in changed)
            raise BenchInputError(f"{out}: holds a bench with other settings ({what}); resume it with the same "
                                  "options or choose another --out")
    else:
        meta.write_text(json.dumps({"settings": ident, "created": time.time()}, indent=2))
    return ResultLog(out / "results.jsonl")


def _pool(s: BenchSettings) -> Any:
    """The pool every judged candidate of a bench goes through: one evaluation at a time (comparable wall
    times), two sandboxes of each kind started ahead."""
    from kernelsmith.referee.pool import LocalPool, RequestError

    try:
        return LocalPool(s.device, slots_per_gpu=1, cpu_slots=1, warm=2)
    except RequestError as exc:
        raise BenchInputError(str(exc)) from None


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:300] if (text or "").strip() else ""


def _eval_task(t: BenchTask, s: BenchSettings, pool: Any) -> dict[str, Any]:
    from kernelsmith.candidate import Candidate, CandidateError
    from kernelsmith.settings import EvalRequest

    root = Path(s.candidates or ".")
    path = candidate_for(t, root)
    if path is None:
        return {"status": NO_CANDIDATE, "error": f"no candidate at {root / t.key} (counted as not correct)"}
    try:
        cand = Candidate.from_file(path)
    except CandidateError as exc:
        return {"status": BAD_CANDIDATE, "error": _first_line(str(exc)), "candidate": str(path)}
    v = pool.run(EvalRequest(task_source=t.task.source, task_name=t.task.name, candidate_source=cand.source,
                             options=s.eval_settings()))
    return {"status": v["status"], "speedup": v.get("speedup"), "speedup_ci": v.get("speedup_ci"),
            "ref_ms": v.get("ref_ms"), "cand_ms": v.get("cand_ms"), "error": _first_line(v.get("error")),
            "guards": [g["name"] for g in v.get("guards") or []], "candidate": str(path),
            "max_rel_err": v.get("max_rel_err"), "device": v.get("device"), "precision": v.get("precision"),
            "numerics": v.get("numerics"), "fp64_error": v.get("fp64_error") or None}


def _evolve_task(t: BenchTask, s: BenchSettings, out: Path, display: Any) -> dict[str, Any]:
    from kernelsmith.workshop.config import load_config
    from kernelsmith.workshop.run import evolve

    run_dir = out / "runs" / t.slug
    flags: dict[str, Any] = {"task": t.path, "rounds": s.rounds, "population": s.population, "device": s.device,
                             "run_dir": run_dir, "proposer": s.proposer, "policy": s.policy,
                             "eval_timeout_s": s.timeout_s, "backend": s.backend}
    if t.overrides:
        flags["overrides"] = t.overrides
    flags.update(_run_precision(s))
    if s.model:
        flags["models"] = [{"name": s.model, "base_url": s.base_url, "api_key_env": s.api_key_env}]
    cfg = load_config(s.config, flags)
    seed = candidate_for(t, Path(s.candidates)) if s.candidates else None
    summary = evolve(cfg, resume=(run_dir / "run.db").exists(), seed_program=seed, display=display)
    status = summary.get("best_status") or "no_program"
    row = {"status": status, "speedup": summary.get("best_speedup"), "speedup_ci": summary.get("best_speedup_ci"),
           "best_id": summary.get("best_id"), "programs": summary.get("programs"),
           "evaluated": summary.get("evaluated"), "tokens": summary.get("tokens"),
           "cost_usd": summary.get("cost_usd"), "stopped": summary.get("stopped"),
           "run_dir": str(run_dir.relative_to(out)), "candidate": str(seed) if seed else None}
    if status != "correct":
        row["error"] = "no correct program" + (f" (stopped: {summary['stopped']})" if summary.get("stopped") else "")
    return row


def _run_precision(s: BenchSettings) -> dict[str, Any]:
    """The run config's precision and numerics for an evolved task; a run config without those settings can
    only run at the defaults (anything else is refused rather than silently not applied)."""
    from kernelsmith.workshop.config import RunConfig

    wanted = {"precision": s.precision, "numerics": s.numerics}
    missing = [k for k in wanted if k not in RunConfig.model_fields]
    if missing and (s.precision, s.numerics) != (DEFAULT_PRECISION, "tolerance"):
        raise BenchInputError(f"--mode evolve: the run config has no {', '.join(missing)} setting yet: only the "
                              f"defaults (--precision {DEFAULT_PRECISION} --numerics tolerance) can be evolved")
    return {k: v for k, v in wanted.items() if k not in missing}


def precision_label(precision: str | None, numerics: str | None = None) -> str:
    """"precision: tf32x3 (fp32 dots as 3 tf32 passes)[, numerics: ...]" for reports; a bench or run recorded
    before the settings existed says so."""
    if not precision:
        text = "precision: not recorded (before the setting: eager and torch.compile at torch's defaults)"
    else:
        text = f"precision: {precision} ({PRECISIONS.get(precision, 'unknown')})"
    if numerics:
        text += f", numerics: {numerics} ({NUMERICS.get(numerics, 'unknown')})"
    return text


def _against_compile(t: BenchTask, s: BenchSettings, row: dict[str, Any]) -> None:
    from kernelsmith.bench.compile_timer import time_compile

    c = time_compile(t.task.source, str(t.path), s.device, precision=s.precision,
                     timeout_s=max(s.timeout_s, 600.0))
    row.update({"eager_ms": c.get("eager_ms"), "compile_ms": c.get("compile_ms"),
                "compile_ratio": c.get("compile_ratio"), "compile_s": c.get("compile_s"),
                "compile_error": c.get("error") or "",
                "compile_precision": c.get("precision") or s.precision})
    ratio, sp = c.get("compile_ratio"), row.get("speedup")
    if row.get("status") == "correct" and ratio and sp:
        row["speedup_vs_compile"] = sp / ratio


def run_task(t: BenchTask, s: BenchSettings, out: Path, display: Any = None, pool: Any = None) -> dict[str, Any]:
    """One task's row (never raises for a problem of the candidate or the evolution; KeyboardInterrupt and the
    workshop's configuration errors propagate). Eval mode judges through `pool` (a `LocalPool`)."""
    from kernelsmith.workshop.config import ConfigError
    from kernelsmith.workshop.proposers import ProposerUnavailable

    started = time.monotonic()
    row: dict[str, Any] = {"task": t.key, "level": t.level, "path": str(t.path)}
    try:
        row.update(_eval_task(t, s, pool or _pool(s)) if s.mode == "eval" else _evolve_task(t, s, out, display))
    except (ConfigError, ProposerUnavailable) as exc:  # the same for every task: stop the bench
        raise BenchInputError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - recorded, retried on resume; the next task still runs
        row.update({"status": BENCH_ERROR, "error": f"{type(exc).__name__}: {_first_line(str(exc))}"})
    if s.against_compile:
        if s.device == "cuda":
            _against_compile(t, s, row)
        else:
            row["compile_error"] = NOT_MEASURED_CPU
    row["elapsed_s"] = round(time.monotonic() - started, 2)
    row["finished_at"] = time.time()
    return row


def run_bench(tasks: list[BenchTask], s: BenchSettings, out: Path, *,
              on_start: Callable[[BenchTask], None] | None = None,
              on_done: Callable[[BenchTask, dict[str, Any], bool], None] | None = None,
              display: Any = None) -> list[dict[str, Any]]:
    """Run the tasks not yet finished in OUT; returns the rows of all `tasks` (finished earlier or now) and
    writes the metrics files. `on_done(task, row, skipped)`; `display` goes to the workshop's `evolve`."""
    s.validate()
    log = open_out(out, s)
    pool = _pool(s) if s.mode == "eval" else None
    rows = []
    for t in tasks:
        if log.done(t.key):
            row = log.rows[t.key]
            if on_done:
                on_done(t, row, True)
        else:
            if on_start:
                on_start(t)
            row = run_task(t, s, out, display, pool)
            log.add(row)
            if on_done:
                on_done(t, row, False)
        rows.append(row)
    write_metrics(out, rows, s)
    return rows


def metrics_tables(rows: list[dict[str, Any]], s: BenchSettings | None = None,
                   device: str | None = None) -> dict[str, Any]:
    """{"eager": by level, "compile": by level, or a string saying why not measured}."""
    tables: dict[str, Any] = {"eager": by_level(rows)}
    against = s.against_compile if s else any("compile_error" in r or "compile_ratio" in r for r in rows)
    dev = device or (s.device if s else None)
    if not against:
        tables["compile"] = NOT_REQUESTED
    elif dev == "cpu":
        tables["compile"] = NOT_MEASURED_CPU
    else:
        tables["compile"] = by_level(rows, "speedup_vs_compile", measured="compile_ratio")
    return tables


def _cell(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}" if math.isfinite(v) else ""
    if isinstance(v, (list, tuple)):
        return ";".join(str(_cell(x)) for x in v)
    return v


def write_metrics(out: Path, rows: list[dict[str, Any]], s: BenchSettings) -> dict[str, Any]:
    tables = metrics_tables(rows, s)
    doc = {"settings": s.identity(), "written_at": time.time(), "metrics": tables,
           "no_candidate": sum(1 for r in rows if r.get("status") == NO_CANDIDATE),
           "errors": sum(1 for r in rows if r.get("status") == BENCH_ERROR), "tasks": rows}
    (out / "metrics.json").write_text(json.dumps(doc, indent=2, default=str))
    (out / "metrics.csv").write_text(to_csv({k: v for k, v in tables.items() if isinstance(v, dict)}))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(TASK_COLUMNS)
    for r in rows:
        w.writerow([_cell(r.get(c)) for c in TASK_COLUMNS])
    (out / "tasks.csv").write_text(buf.getvalue())
    return doc


def load_bench(out: Path) -> dict[str, Any]:
    """A bench OUT dir's metrics.json (recomputed from results.jsonl when the bench never reached its end)."""
    if not out.is_dir():
        raise BenchInputError(f"{out}: no such bench directory")
    metrics = out / "metrics.json"
    if metrics.exists():
        try:
            return json.loads(metrics.read_text())
        except json.JSONDecodeError:
            pass
    results = out / "results.jsonl"
    if not results.exists():
        raise BenchInputError(f"{out}: not a bench output (no metrics.json or results.jsonl)")
    rows = list(ResultLog(results).rows.values())
    settings = {}
    if (out / "bench.json").exists():
        settings = json.loads((out / "bench.json").read_text()).get("settings", {})
    device = settings.get("device")
    tables = metrics_tables(rows, None, device)
    return {"settings": settings, "metrics": tables, "tasks": rows,
            "no_candidate": sum(1 for r in rows if r.get("status") == NO_CANDIDATE),
            "errors": sum(1 for r in rows if r.get("status") == BENCH_ERROR), "partial": True}
