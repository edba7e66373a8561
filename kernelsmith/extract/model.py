"""The orchestrator of `kernelsmith extract` (trusted; never imports or runs the model).

It reads the model file statically (`Task.load`: one-line errors, `--set` as a source rewrite), starts the worker
in a referee sandbox (`Child.start`, as the CUDA builder is started: a host work dir bound as the sandbox's only
writable dir), and takes back one JSON report. The report comes from a process that ran hostile code, so it is
validated like any input: names are checked, numbers bounded, every task is rendered here from its spec (data,
not code) by the renderer the worker used, and the digests must agree. Only then are the task files and
`extract.json` written into the output dir, each task file checked with `Task.load`.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith import pyast
from kernelsmith.extract import spec as S
from kernelsmith.task import Task, TaskError

RESULT_LIMIT = 64 << 20  # bytes of report read back from the worker
GRAPH = "graph.json"  # the traced forward as data, for `kernelsmith optimize`
NAME = re.compile(r"^[a-z0-9_]{1,60}$")


class ExtractError(Exception):
    """Extraction did not produce a report. `kind`: `model_failed` (the model's own code failed, or it was too
    big or slow for the sandbox: bad input) or `extract_failed` (the worker itself failed)."""

    def __init__(self, message: str, file: str | Path | None = None, kind: str = "extract_failed", hint: str = ""):
        super().__init__(message)
        self.file = str(file) if file is not None else None
        self.kind = kind
        self.hint = hint


@dataclass
class ExtractOptions:
    device: str = "cpu"
    top: int = 5
    overrides: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 600.0
    gpu: int = 0


def line_map(original: str, rewritten: str) -> dict[int, int]:
    """Lines of the rewritten source (what ran: overrides applied, `ast.unparse`d) → lines of the user's file.
    Only constants' values differ, so both have the same statements in the same order."""
    if original == rewritten:
        return {}
    try:
        a = [n for n in ast.walk(pyast.parse(original)) if isinstance(n, ast.stmt)]
        b = [n for n in ast.walk(pyast.parse(rewritten)) if isinstance(n, ast.stmt)]
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return {}
    if [type(x) for x in a] != [type(y) for y in b]:
        return {}
    out: dict[int, int] = {}
    for x, y in zip(a, b):  # breadth first: a nested statement overwrites its parent's lines
        span_x, span_y = (x.end_lineno or x.lineno) - x.lineno, (y.end_lineno or y.lineno) - y.lineno
        for line in range(y.lineno, y.lineno + span_y + 1):
            out[line] = x.lineno + (line - y.lineno if span_x == span_y else 0)
    return out


def _bounded_float(v: Any, lo: float = 0.0, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise ValueError(f"{v!r} is not a number in [{lo}, {hi}]")
    return float(v)


def _text(v: Any, limit: int = 300) -> str:
    return re.sub(r"[\x00-\x1f\x7f]", " ", str(v))[:limit]


def _shapes(v: Any) -> list[dict[str, Any]]:
    if not isinstance(v, list):
        return []
    out = []
    for d in v[:64]:
        if isinstance(d, dict) and d.get("dtype") in S.DTYPES and isinstance(d.get("shape"), list) \
                and all(type(s) is int and s >= 0 for s in d["shape"]):
            out.append({"shape": d["shape"][: S.MAX_RANK], "dtype": d["dtype"]})
    return out


def _check(v: Any) -> dict[str, Any] | None:
    if not isinstance(v, dict) or not isinstance(v.get("ok"), bool):
        return None
    out: dict[str, Any] = {"ok": v["ok"]}
    for k in ("max_abs_err", "max_rel_err"):
        x = v.get(k)
        out[k] = x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None
    out["reason"] = _text(v.get("reason", ""))
    return out


def validate_group(g: Any, lines: dict[int, int]) -> dict[str, Any]:
    """One group of the worker's report, checked and with lines in the user's file; ValueError if malformed."""
    if not isinstance(g, dict):
        raise ValueError("a group is not an object")
    name = g.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"bad group name {name!r}")
    ops = g.get("ops")
    if not isinstance(ops, list) or len(ops) > S.MAX_NODES or not all(isinstance(o, str) for o in ops):
        raise ValueError(f"group {name}: bad ops")
    raw_lines = g.get("lines", [])
    if not isinstance(raw_lines, list) or not all(type(x) is int and x > 0 for x in raw_lines):
        raise ValueError(f"group {name}: bad lines")
    line = g.get("line")
    if line is not None and (type(line) is not int or line <= 0):
        raise ValueError(f"group {name}: bad line {line!r}")
    out: dict[str, Any] = {
        "name": name, "share": _bounded_float(g.get("share"), 0.0, 1.0), "ms": _bounded_float(g.get("ms")),
        "line": lines.get(line, line) if line is not None else None,
        "ops": [_text(o, 60) for o in ops],
        "lines": sorted({lines.get(x, x) for x in raw_lines}) if lines else sorted(set(raw_lines)),
        "inputs": _shapes(g.get("inputs")), "outputs": _shapes(g.get("outputs")),
    }
    if "reason" in g:
        out["reason"] = _text(g["reason"], 500)
    if isinstance(g.get("spec"), dict):
        out["spec"], out["digest"] = g["spec"], g.get("digest")
        out["check"], out["standalone"] = _check(g.get("check")), _check(g.get("standalone"))
        if isinstance(g.get("task_ms"), (int, float)) and math.isfinite(g["task_ms"]):
            out["task_ms"] = float(g["task_ms"])
        if g.get("site") is not None:
            out["site"] = validate_site(g["site"], name)
    return out


PATH = re.compile(r"^[A-Za-z0-9_]{1,80}(\.[A-Za-z0-9_]{1,80}){0,31}$")


def validate_site(v: Any, name: str) -> dict[str, Any]:
    """Where a task sits in the model's graph (the worker's `site`): variable names and dotted paths only."""
    if not isinstance(v, dict):
        raise ValueError(f"group {name}: bad site")
    if v.get("kind") == "module":
        return _module_site(v, name)
    out: dict[str, Any] = {}
    for key in ("nodes", "members", "feeds", "returns"):
        xs = v.get(key)
        if not isinstance(xs, list) or len(xs) > S.MAX_NODES or not all(isinstance(x, str) and S.IDENT.match(x)
                                                                        for x in xs):
            raise ValueError(f"group {name}: bad site {key}")
        out[key] = list(xs)
    for key in ("modules", "tensors"):
        m = v.get(key)
        if not isinstance(m, dict) or len(m) > S.MAX_NODES or not all(
                isinstance(a, str) and S.IDENT.match(a) and isinstance(p, str) and PATH.match(p) for a, p in m.items()):
            raise ValueError(f"group {name}: bad site {key}")
        out[key] = dict(m)
    return out


def _module_site(v: dict[str, Any], name: str) -> dict[str, Any]:
    """A task that is one call of a torch.nn module (the hooks trace): the module's path, the call's arguments
    (its tensors as the task's inputs x0, x1, ...; the rest literals), where each output sits in its result."""
    path, args, kwargs, outputs, modules = (v.get(k) for k in ("path", "args", "kwargs", "outputs", "modules"))
    if not isinstance(path, str) or not PATH.match(path):
        raise ValueError(f"group {name}: bad site path")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError(f"group {name}: bad site call")
    refs = {f"x{i}" for i in range(S.MAX_NODES)}
    try:
        S.literal(args, refs, set(), "site")
        for k, x in kwargs.items():
            S._ident(k, "site")
            S.literal(x, refs, set(), "site")
    except S.SpecError as exc:
        raise ValueError(f"group {name}: bad site call: {exc}") from None
    if not isinstance(outputs, list) or not outputs or len(outputs) > S.MAX_NODES or not all(
            isinstance(o, list) and len(o) <= S.MAX_RANK and all(type(i) is int and 0 <= i < 1 << 16 for i in o)
            for o in outputs):
        raise ValueError(f"group {name}: bad site outputs")
    if not isinstance(modules, dict) or not all(isinstance(a, str) and S.IDENT.match(a) and isinstance(p, str)
                                                and PATH.match(p) for a, p in modules.items()):
        raise ValueError(f"group {name}: bad site modules")
    return {"kind": "module", "path": path, "args": args, "kwargs": kwargs, "outputs": outputs,
            "modules": dict(modules), "tensors": {}}


def run_worker(task: Task, opts: ExtractOptions) -> dict[str, Any]:
    """Start the sandboxed worker on `task` and return its report (unvalidated), or `ExtractError`."""
    from kernelsmith.referee.sandbox import run_job

    job = {"source": task.source, "filename": str(task.path), "device": opts.device, "top": opts.top}
    data, outcome, log = run_job("kernelsmith.extract.worker", job, opts.device, opts.timeout_s, gpu=opts.gpu,
                                 report_limit=RESULT_LIMIT)
    if data is None:
        tail = " ".join(log.split())[-300:]
        if outcome.timed_out:
            raise ExtractError(f"{task.path}: the model did not finish extraction within {opts.timeout_s:g} s",
                               task.path, "model_failed", _smaller(task, "or a longer --timeout"))
        if outcome.memory_exceeded:
            raise ExtractError(f"{task.path}: the model ran out of memory in the sandbox "
                               f"({outcome.peak_rss_mb:.0f} MB)", task.path, "model_failed", _smaller(task))
        why = outcome.signal_name or f"exit code {outcome.returncode}"
        raise ExtractError(f"{task.path}: the extraction worker ended ({why}) without a report: {tail}", task.path,
                           "model_failed", "the model's code may have exited or crashed the process")
    if data.get("ok") is not True:
        error = _text(data.get("error", "no report"), 600)
        if data.get("fault") == "model":
            raise ExtractError(f"{task.path}: the model failed on its own: {error}", task.path, "model_failed",
                               "check Model, get_inputs() and get_init_inputs() run on their own")
        raise ExtractError(f"{task.path}: extraction failed: {error}", task.path, "extract_failed")
    return data


def _smaller(task: Task, extra: str = "") -> str:
    sizes = task.size_constants()
    if not sizes:
        return "try smaller sizes" + (f" {extra}" if extra else "")
    biggest = max(sizes, key=lambda k: sizes[k])
    return f"try smaller sizes, e.g. --set {biggest}={max(1, sizes[biggest] // 2)}" + (f" {extra}" if extra else "")


def extract(model_file: str | Path, out_dir: str | Path, opts: ExtractOptions) -> dict[str, Any]:
    """Extract the top subgraphs of the model in `model_file` into `out_dir`; returns what `extract.json` holds.
    `TaskError` for a model file that cannot be read, `ExtractError` when no report came back."""
    task = Task.load(model_file, opts.overrides, device=opts.device)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise TaskError(f"{out}: --out must be a directory", out, "not_a_file")
    data = run_worker(task, opts)
    lines = line_map(task.original_source, task.source)
    raw = data.get("groups")
    if not isinstance(raw, list):
        raise ExtractError(f"{task.path}: the worker's report has no groups", task.path)
    try:
        groups = [validate_group(g, lines) for g in raw[:100000]]
    except ValueError as exc:
        raise ExtractError(f"{task.path}: the worker's report is malformed: {exc}", task.path) from None
    groups.sort(key=lambda g: g["share"], reverse=True)
    total = sum(g["share"] for g in groups)
    if total > 1.0 + 1e-6:  # the worker's arithmetic never does this; a forged report might
        for g in groups:
            g["share"] /= total
    out.mkdir(parents=True, exist_ok=True)
    source_lines = task.original_source.splitlines()
    tasks, missing = [], []
    for rank, g in enumerate(groups[: opts.top], start=1):
        where = g["line"] or (g["lines"][0] if g["lines"] else None)  # the anchor's line, else the first
        entry: dict[str, Any] = {
            "rank": rank, "name": g["name"], "share": round(g["share"], 6), "ms": round(g["ms"], 4),
            "line": where, "lines": g["lines"],
            "code": source_lines[where - 1].strip()[:160] if where and where <= len(source_lines) else None,
            "ops": g["ops"], "inputs": g["inputs"], "outputs": g["outputs"]}
        if "site" in g:
            entry["site"] = g["site"]
        reason = g.get("reason") or _write_task(g, out, rank, task, entry)
        if reason:
            missing.append({**entry, "reason": reason})
        else:
            tasks.append(entry)
    rest = groups[opts.top:]
    report = {
        "model": str(task.path), "device": opts.device, "overrides": task.overrides,
        "trace": "fx" if data.get("trace") == "fx" else "hooks", "trace_note": _text(data.get("trace_note", "")),
        "model_ms": _ms(data.get("model_ms")), "reps": data.get("reps") if type(data.get("reps")) is int else None,
        "model_inputs": _shapes(data.get("model_inputs")), "model_outputs": _shapes(data.get("model_outputs")),
        "top": opts.top, "tasks": tasks, "not_extracted": missing,
        "rest": {"groups": len(rest), "share": round(sum(g["share"] for g in rest), 6)},
        "unattributed_share": round(max(0.0, 1.0 - sum(g["share"] for g in groups)), 6),
        "profile": [{"op": _text(p.get("op", ""), 80), "self_ms": _ms(p.get("self_ms")),
                     "calls": p.get("calls") if type(p.get("calls")) is int else None}
                    for p in (data.get("profile") or [])[:20] if isinstance(p, dict) and "op" in p],
        "versions": {k: _text(v, 40) for k, v in (data.get("versions") or {}).items()
                     if k in ("python", "torch") and isinstance(v, str)},
    }
    graph = data.get("graph")
    if isinstance(graph, dict) and isinstance(graph.get("steps"), list):  # data for `optimize`, rendered there
        (out / ".graph.json.tmp").write_text(json.dumps(graph))
        os.replace(out / ".graph.json.tmp", out / GRAPH)
        report["graph"] = GRAPH
    else:
        (out / GRAPH).unlink(missing_ok=True)
        report["graph_note"] = _text(data.get("graph_note") or "the model was not traced by fx")
    tmp = out / ".extract.json.tmp"
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, out / "extract.json")
    return report


def _ms(v: Any) -> float | None:
    return round(float(v), 4) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) \
        else None


def _write_task(g: dict[str, Any], out: Path, rank: int, task: Task, entry: dict[str, Any]) -> str:
    """Render the group's spec here, write it, check it loads; '' on success, else the reason it was not."""
    if "spec" not in g:
        return "the worker sent no task for it"
    try:
        code = S.render_code(g["spec"])
    except S.SpecError as exc:
        return f"the worker's spec cannot be rendered: {exc}"
    if S.digest(code) != g.get("digest"):
        return "the rendered task differs from the one the worker checked"
    check, standalone = g.get("check"), g.get("standalone")
    entry["check"] = check or {"ok": False, "reason": "not checked"}
    entry["standalone"] = standalone or {"ok": False}
    entry["task_ms"] = g.get("task_ms")
    where = f"{task.path}" + (f", line {entry['line']}" if entry["line"] else "")
    head = S.header([f"Extracted by `kernelsmith extract` from {where}: {g['name']}, "
                     f"{100 * g['share']:.1f}% of the model's time (rank {rank}).",
                     "Ops: " + ", ".join(g["ops"]),
                     "Checked against the model's own intermediates: "
                     + ("matches" if entry["check"].get("ok") else "DOES NOT MATCH")
                     + (f" (max abs err {entry['check']['max_abs_err']:.3g})"
                        if isinstance(entry["check"].get("max_abs_err"), float) else "") + "."])
    path = out / f"{rank:02d}_{g['name']}.py"
    path.write_text(head + code)
    try:
        Task.load(path)
    except TaskError as exc:
        path.unlink(missing_ok=True)
        return f"the written task does not load: {exc}"
    entry["file"] = path.name
    return ""
