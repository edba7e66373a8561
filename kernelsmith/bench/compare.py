"""`kernelsmith compare A B`: two bench runs side by side — every metric per group, every task, deltas B − A."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernelsmith.bench.metrics import METRIC_NAMES
from kernelsmith.bench.runner import load_bench

SHOWN = ("tasks", "correct_rate", "fast_0", "fast_1", "fast_1.5", "fast_2", "amsr", "geomean")


def _delta(a: Any, b: Any) -> float | None:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return b - a
    return None


def compare(a: Path, b: Path) -> dict[str, Any]:
    da, db = load_bench(a), load_bench(b)
    metrics: dict[str, Any] = {}
    for baseline in ("eager", "compile"):
        ta, tb = da["metrics"].get(baseline), db["metrics"].get(baseline)
        if not isinstance(ta, dict) or not isinstance(tb, dict):
            metrics[baseline] = {"a": ta if not isinstance(ta, dict) else "measured",
                                 "b": tb if not isinstance(tb, dict) else "measured", "comparable": False}
            continue
        groups = {}
        for g in [*ta, *(k for k in tb if k not in ta)]:
            ma, mb = ta.get(g, {}), tb.get(g, {})
            groups[g] = {n: {"a": ma.get(n), "b": mb.get(n), "delta": _delta(ma.get(n), mb.get(n))}
                         for n in METRIC_NAMES}
        metrics[baseline] = groups
    ra = {r["task"]: r for r in da.get("tasks", [])}
    rb = {r["task"]: r for r in db.get("tasks", [])}
    tasks = []
    for key in [*ra, *(k for k in rb if k not in ra)]:
        x, y = ra.get(key, {}), rb.get(key, {})
        sa, sb = x.get("speedup"), y.get("speedup")
        ratio = sb / sa if isinstance(sa, (int, float)) and isinstance(sb, (int, float)) and sa > 0 else None
        sx, sy = x.get("status", "absent"), y.get("status", "absent")
        change = ("same" if sx == sy else "fixed" if sy == "correct" else "broke" if sx == "correct" else "changed")
        tasks.append({"task": key, "level": x.get("level") or y.get("level"), "status_a": sx, "status_b": sy,
                      "change": change, "speedup_a": sa, "speedup_b": sb, "speedup_ratio": ratio,
                      "speedup_delta": _delta(sa, sb)})
    return {"a": str(a), "b": str(b), "metrics": metrics, "tasks": tasks,
            "summary": {k: sum(1 for t in tasks if t["change"] == k) for k in ("same", "fixed", "broke", "changed")}}


def _fmt(name: str, v: Any, signed: bool = False) -> str:
    if v is None:
        return "—"
    sign = "+" if signed and v > 0 else ""
    if name in ("tasks", "correct", "timed"):
        return f"{sign}{v:g}"
    if name == "geomean":
        return f"{sign}{v:.3f}" + ("" if signed else "×")
    if name == "amsr":
        return f"{sign}{v:.3f}"
    return f"{sign}{100 * v:.1f}" + (" pp" if signed else "%")


def print_comparison(result: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    for baseline, groups in result["metrics"].items():
        if groups.get("comparable") is False:
            console.print(f"against {baseline}: A {groups['a']}; B {groups['b']}", highlight=False)
            continue
        t = Table(title=f"against {baseline}: A = {result['a']}, B = {result['b']}")
        for col in ("group", "metric", "A", "B", "B − A"):
            t.add_column(col, justify="left" if col in ("group", "metric") else "right")
        for g, ms in groups.items():
            for n in SHOWN:
                m = ms[n]
                d = m["delta"]
                colour = "" if not d else ("green" if d > 0 else "red")
                delta = _fmt(n, d, signed=True)
                t.add_row(g, n, _fmt(n, m["a"]), _fmt(n, m["b"]), f"[{colour}]{delta}[/]" if colour else delta)
            t.add_section()
        console.print(t)
    t = Table(title="tasks")
    t.add_column("task", no_wrap=True)
    for col in ("A", "B", "speedup A", "speedup B", "B / A"):
        t.add_column(col, justify="right" if col.startswith(("speedup", "B /")) else "left")
    for r in result["tasks"]:
        style = {"fixed": "green", "broke": "red"}.get(r["change"], "")
        ratio = f"{r['speedup_ratio']:.3f}×" if r["speedup_ratio"] else "—"
        t.add_row(r["task"], r["status_a"], r["status_b"],
                  f"{r['speedup_a']:.3f}×" if r["speedup_a"] else "—",
                  f"{r['speedup_b']:.3f}×" if r["speedup_b"] else "—", ratio, style=style)
    console.print(t)
    s = result["summary"]
    console.print(f"{s['fixed']} fixed, {s['broke']} broke, {s['changed']} changed status, {s['same']} same",
                  highlight=False)
