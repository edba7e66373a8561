"""Write an export package from a run dir (and, later, from an optimize dir: anything that yields an
`ExportSource`).

A source is read through `workshop.record.RunReader` only; the program's code and the task's source are written
to files and parsed here, never executed: the package's own test file runs them.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith import pyast
from kernelsmith.export import templates

MANIFEST = "export.json"
FORMAT = 1  # export.json's "kernelsmith_export": what a later export recognises as its own files
FILES = ("__init__.py", "kernels.py", "reference.py", "test_package.py", "README.md", MANIFEST)
SEEDS = (0, 1, 2)
JUNK = ("__pycache__", ".pytest_cache")  # left by running the package: a re-export may remove them


class ExportError(ValueError):
    """A source that cannot be exported or a PKG_DIR that cannot be written; the message names the file."""

    def __init__(self, message: str, file: str | Path | None = None, kind: str = "bad_input"):
        super().__init__(message)
        self.file = file
        self.kind = kind


@dataclass(frozen=True)
class ExportSource:
    """What a package is made of, whatever kind of dir it came from."""

    kind: str  # "run" (an evolve run dir) or "optimize" (an optimize dir: the assembled model)
    source_dir: str
    task: str  # the task's name
    task_file: str
    task_source: str  # with the run's overrides applied: the shapes the program was verified at
    overrides: dict[str, Any]
    program: str  # the program's name in the run ("r3c1")
    program_source: str
    device: str  # "cuda" or "cpu", as run
    hardware: dict[str, Any]  # torch, triton, python, name (the GPU's)
    verdict: dict[str, Any] = field(default_factory=dict)
    has_test_inputs: bool = False
    parts: list[dict[str, Any]] = field(default_factory=list)  # an optimize dir's parts, as its report has them


def source_from_run(run_dir: str | Path) -> ExportSource:
    """The incumbent (the program `best.py` holds) of an evolve run dir, with its task. ExportError when the dir
    is not a run, its task file is gone, or it has no correct program."""
    from kernelsmith.task import Task, TaskError
    from kernelsmith.workshop.record import RunReader
    from kernelsmith.workshop.store import StoreError

    try:
        reader = RunReader(run_dir)
    except StoreError as exc:
        raise ExportError(str(exc), run_dir, "not_a_run") from None
    with reader:
        config = reader.config
        programs = reader.programs()
        best_id = reader.summary().get("best_id")
        if best_id is None:
            try:
                best = reader.archive().best()
            except ValueError as exc:
                raise ExportError(f"{run_dir}: cannot rebuild the run's archive: {exc}", run_dir) from None
            best_id = best.id if best is not None else None
        hardware = reader.counters().get("hardware") or {}
    record = next((p for p in programs if p.name == best_id), None)
    if record is None or not record.correct:
        what = f"its best program {best_id} is {record.status}" if record else "it holds no judged program"
        raise ExportError(f"{run_dir}: no correct program to export ({what}; "
                          f"{sum(p.correct for p in programs)} of {len(programs)} correct)", run_dir, "no_correct")
    task_file = str(config.get("task") or "")
    if not task_file:
        raise ExportError(f"{Path(run_dir) / 'config.yaml'}: the run names no task file", run_dir)
    device = str(config.get("device") or "cuda")
    try:
        task = Task.load(task_file, dict(config.get("overrides") or {}), device=device)
    except TaskError as exc:
        raise ExportError(f"{exc} (the task of run {run_dir})", task_file, getattr(exc, "kind", "bad_input")
                          ) from None
    return ExportSource(kind="run", source_dir=str(run_dir), task=task.name, task_file=str(task.path),
                        task_source=task.source, overrides=dict(task.overrides), program=record.name,
                        program_source=record.code, device=device, hardware=dict(hardware),
                        verdict=dict(record.verdict or {}), has_test_inputs=task.has_test_inputs)


def source_from_optimize(opt_dir: str | Path) -> ExportSource:
    """The assembled model of an optimize dir (`optimized.py`, judged by the referee), with the model it was
    made from. ExportError when no part was swapped in or the referee did not find it correct."""
    from kernelsmith.task import Task, TaskError
    from kernelsmith.workshop.record import RunReader
    from kernelsmith.workshop.store import StoreError

    opt_dir = Path(opt_dir)
    try:
        report = json.loads((opt_dir / "optimize.json").read_text())
    except (OSError, ValueError) as exc:
        raise ExportError(f"{opt_dir}: the optimize has not finished (no readable optimize.json: {exc}); re-run "
                          "kernelsmith optimize on it", opt_dir, "not_a_run") from None
    verdict = report.get("verdict") or {}
    if not report.get("swapped") or not verdict.get("correct"):
        why = "no part was swapped in" if not report.get("swapped") else \
            f"the referee found optimized.py {verdict.get('status')}"
        raise ExportError(f"{opt_dir}: nothing to export ({why})", opt_dir, "no_correct")
    try:
        program = (opt_dir / "optimized.py").read_text()
    except OSError as exc:
        raise ExportError(f"{opt_dir / 'optimized.py'}: cannot read: {exc.strerror}", opt_dir, "not_a_run") from None
    if hashlib.sha256(program.encode()).hexdigest() != verdict.get("optimized_sha256"):
        raise ExportError(f"{opt_dir / 'optimized.py'}: not the file the referee judged (edited since); re-run "
                          "kernelsmith optimize on it", opt_dir, "not_a_run")
    device = str(report.get("device") or "cuda")
    try:
        task = Task.load(report["model"], dict(report.get("overrides") or {}), device=device)
    except TaskError as exc:
        raise ExportError(f"{exc} (the model of optimize dir {opt_dir})", report["model"],
                          getattr(exc, "kind", "bad_input")) from None
    hardware: dict[str, Any] = {}
    for row in report.get("parts", []):
        if row.get("swapped") and row.get("run_dir"):
            try:
                with RunReader(opt_dir / row["run_dir"]) as reader:
                    hardware = dict(reader.counters().get("hardware") or {})
            except StoreError:
                continue
            break
    swapped = [r["name"] for r in report.get("parts", []) if r.get("swapped")]
    return ExportSource(kind="optimize", source_dir=str(opt_dir), task=task.name, task_file=str(task.path),
                        task_source=task.source, overrides=dict(task.overrides), program=", ".join(swapped),
                        program_source=program, device=device, hardware=hardware, verdict=dict(verdict),
                        has_test_inputs=task.has_test_inputs, parts=list(report.get("parts", [])))


def export(source_dir: str | Path, out: str | Path) -> dict[str, Any]:
    """Export `source_dir` (an evolve run dir or an optimize dir) to the package dir `out`; returns the
    manifest."""
    source_dir = Path(source_dir)
    if not source_dir.is_dir():
        raise ExportError(f"{source_dir}: not a directory", source_dir, "not_a_run")
    if (source_dir / "request.json").is_file() and (source_dir / "extract").is_dir():
        return write_package(source_from_optimize(source_dir), out)
    return write_package(source_from_run(source_dir), out)


def parts_table(src: ExportSource) -> str:
    """The optimize report's parts: share of the model's time before and after, the part's speedup, swapped."""
    rows = ["| part | line | share before | share after | part speedup | swapped |", "|---|---|---|---|---|---|"]
    for r in src.parts:
        pct = [f"{100 * r[k]:.1f}%" if isinstance(r.get(k), (int, float)) else "—"
               for k in ("share_before", "share_after")]
        sp = f"{r['speedup']:.3f}×" if isinstance(r.get("speedup"), (int, float)) else "—"
        rows.append(f"| {r.get('name')} | {r.get('line') or '—'} | {pct[0]} | {pct[1]} | {sp} | "
                    f"{'yes' if r.get('swapped') else 'no'} |")
    return "\n".join(rows)


def check_out_dir(out: Path) -> list[Path]:
    """The files a previous export left in `out` (to replace); ExportError naming any other file."""
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out}: exists and is not a directory", out, "bad_out")
    if not out.name.isidentifier():
        raise ExportError(f"{out}: {out.name!r} is not a Python package name (letters, digits, _)", out, "bad_out")
    if not out.is_dir():
        return []
    ours: set[str] = set()
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            data = json.loads(manifest.read_text())
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and data.get("kernelsmith_export") == FORMAT:
            ours = {str(f) for f in data.get("files", []) if isinstance(f, str)}
    old = []
    for entry in sorted(out.iterdir()):
        if entry.name in JUNK and entry.is_dir():
            old.append(entry)
        elif entry.name in ours and entry.is_file() and not entry.is_symlink():
            old.append(entry)
        else:
            raise ExportError(f"{entry}: PKG_DIR holds a file that no previous export wrote; choose an empty "
                              "or new --out", entry, "bad_out")
    return old


def _checked(name: str, text: str, must_define: str, out: Path) -> str:
    """`text` if it parses and binds `must_define` at module level (it is not run here)."""
    try:
        tree = pyast.parse(text, filename=str(out / name))
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        raise ExportError(f"{out / name}: the recorded code does not parse: {exc}", out / name, "syntax") from None
    defined, star = pyast.bound_names(tree)  # type: ignore[arg-type]
    if must_define not in defined and not star:
        raise ExportError(f"{out / name}: the recorded code defines no {must_define}", out / name, "not_a_program")
    return text


def _fmt(value: Any, spec: str = ".3g") -> str:
    return "—" if value is None else format(value, spec) if isinstance(value, (int, float)) else str(value)


def speedup_text(src: ExportSource) -> str:
    """The verdict's speedup with its interval, or why there is none."""
    speedup, ci = src.verdict.get("speedup"), src.verdict.get("speedup_ci")
    if speedup is None:
        return ("not measured (a CPU run: Triton's interpreter checks correctness only)" if src.device == "cpu"
                else "not measured")
    interval = f" (95% interval {ci[0]:.3f}–{ci[1]:.3f})" if ci and len(ci) == 2 else ""
    vs_compile = src.verdict.get("speedup_vs_compile")
    compiled = f"; {vs_compile:.3f}× vs torch.compile" if isinstance(vs_compile, (int, float)) else ""
    return f"{speedup:.3f}× vs the PyTorch reference{interval}{compiled}"


def _tolerances() -> tuple[str, float]:
    """The referee's per-dtype tolerances as a literal keyed by dtype name (the package cannot import them)."""
    import torch

    from kernelsmith.referee.compare import DEFAULT_TOLERANCE

    entries = ", ".join(f"{str(k).replace('torch.', '')!r}: {v!r}" for k, v in DEFAULT_TOLERANCE.items())
    return "{" + entries + "}", float(DEFAULT_TOLERANCE.get(torch.float32, 1e-3))


def render(src: ExportSource, package: str) -> dict[str, str]:
    """The package's files by name."""
    tolerances, default = _tolerances()
    hw = src.hardware
    overrides = ", " + ", ".join(f"{k}={v!r}" for k, v in src.overrides.items()) if src.overrides else ""
    optimize = src.kind == "optimize"
    readme = (templates.README_OPTIMIZE if optimize else templates.README).format(
        package=package, task=src.task, task_file=src.task_file, overrides=overrides, program=src.program,
        origin=f"the assembled model of optimize dir `{src.source_dir}`" if src.kind == "optimize" else
        f"the best correct program of {src.kind} dir `{src.source_dir}`",
        device=src.verdict.get("device") or src.device,
        gpu=hw.get("name") if src.device == "cuda" else f"none ({hw.get('name') or 'cpu'})",
        torch=hw.get("torch") or "—", triton=hw.get("triton") or "—", python=hw.get("python") or "—",
        speedup=speedup_text(src), max_abs_err=_fmt(src.verdict.get("max_abs_err")),
        max_rel_err=_fmt(src.verdict.get("max_rel_err")), trials=_fmt(src.verdict.get("trials")),
        seeds=", ".join(map(str, SEEDS)),
        test_inputs_note=", `get_test_inputs()`" if src.has_test_inputs else "",
        hidden_note=" and the task's hidden shapes (`get_test_inputs()`)" if src.has_test_inputs else "",
        parts_table=parts_table(src) if optimize else "")
    return {
        "__init__.py": (templates.INIT_OPTIMIZE if optimize else templates.INIT).format(title=package, task=src.task),
        "kernels.py": src.program_source,
        "reference.py": src.task_source,
        "test_package.py": templates.TEST.format(tolerances=tolerances, default_tolerance=default,
                                                 seeds=list(SEEDS), in_place=optimize),
        "README.md": readme,
    }


def write_package(src: ExportSource, out: str | Path) -> dict[str, Any]:
    """Write the package for `src` into `out` (replacing a previous export there); returns the manifest."""
    out = Path(out)
    old = check_out_dir(out)
    files = render(src, out.name)
    _checked("kernels.py", files["kernels.py"], "ModelNew", out)
    _checked("reference.py", files["reference.py"], "Model", out)
    for name in ("__init__.py", "test_package.py"):
        ast.parse(files[name], filename=str(out / name))  # our own templates: a failure here is a bug
    manifest = {
        "kernelsmith_export": FORMAT, "package": out.name, "files": list(FILES), "exported_at": time.time(),
        "source": {k: v for k, v in asdict(src).items()
                   if k not in ("task_source", "program_source", "verdict", "parts")},
        "speedup": src.verdict.get("speedup"), "speedup_ci": src.verdict.get("speedup_ci"),
        "speedup_text": speedup_text(src),
    }
    try:
        for entry in old:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2))
    except OSError as exc:
        raise ExportError(f"{out}: cannot write the package: {exc}", out, "bad_out") from None
    return manifest
