"""The recipe's and KernelBench's metrics over a set of verdicts, per level and overall.

- correctness rate: share of tasks whose candidate is correct;
- fast_p: share of tasks that are correct *and* faster than p× the baseline, for p in FAST_P;
- AMSR: average speedup over all tasks, with speedups below 1 (and failures) counted as 0;
- geomean: geometric-mean speedup over the correct tasks that have a measured speedup.
A task is one row: `{"task", "level", "status", "speedup"}` (speedup None where not measured).

The same metrics against `torch.compile` use another speedup column (`key="speedup_vs_compile"`) and only the
tasks where that baseline was measured (`measured="compile_ratio"`): a task whose compile timing failed or was not
attempted says nothing about how kernels compare with torch.compile.
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)
METRIC_NAMES = ("tasks", "correct", "timed", "correct_rate", *(f"fast_{p:g}" for p in FAST_P), "amsr", "geomean")


def _speedup(row: Mapping[str, Any], key: str = "speedup") -> float | None:
    s = row.get(key)
    if s is None or isinstance(s, bool):
        return None
    try:
        s = float(s)
    except (TypeError, ValueError):
        return None
    return s if math.isfinite(s) and s > 0 else None


def summarise(rows: list[Mapping[str, Any]], key: str = "speedup") -> dict[str, Any]:
    """Metrics for one group of task rows, speedups read from column `key`."""
    n = len(rows)
    correct = [r for r in rows if r.get("status") == "correct"]
    timed = [s for s in (_speedup(r, key) for r in correct) if s is not None]
    out: dict[str, Any] = {"tasks": n, "correct": len(correct), "timed": len(timed),
                           "correct_rate": len(correct) / n if n else 0.0}
    for p in FAST_P:
        fast = sum(1 for r in correct if (_speedup(r, key) or 0.0) > p) if p > 0 else len(correct)
        out[f"fast_{p:g}"] = fast / n if n else 0.0
    out["amsr"] = sum(s for s in timed if s >= 1.0) / n if n else 0.0
    out["geomean"] = math.exp(sum(math.log(s) for s in timed) / len(timed)) if timed else None
    return out


def by_level(rows: Iterable[Mapping[str, Any]], key: str = "speedup",
             measured: str | None = None) -> dict[str, dict[str, Any]]:
    """{"overall": ..., "level1": ..., ...} — the table `kernelsmith bench` writes.

    `measured`: keep only the rows where that column is a measured (positive, finite) number — for a baseline
    timed on some tasks only (torch.compile: `measured="compile_ratio"`). Failing tasks whose baseline was
    measured stay in, counted as failures."""
    rows = list(rows)
    if measured is not None:
        rows = [r for r in rows if _speedup(r, measured) is not None]
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r.get("level") or "unknown")].append(r)
    return {"overall": summarise(rows, key), **{k: summarise(v, key) for k, v in sorted(groups.items())}}


def to_csv(tables: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """One CSV row per (baseline, group): `{"eager": by_level(...), "compile": by_level(...)}` → text."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["baseline", "group", *METRIC_NAMES])
    for baseline, table in tables.items():
        for group, m in table.items():
            w.writerow([baseline, group, *("" if m.get(k) is None else m.get(k) for k in METRIC_NAMES)])
    return buf.getvalue()
