"""The recipe's and KernelBench's metrics over a set of verdicts, per level and overall.

- correctness rate: share of tasks whose candidate is correct;
- fast_p: share of tasks that are correct *and* faster than p× the baseline, for p in FAST_P;
- AMSR: average speedup over all tasks, with speedups below 1 (and failures) counted as 0;
- geomean: geometric-mean speedup over the correct tasks that have a measured speedup.
A task is one row: `{"task", "level", "status", "speedup"}` (speedup None where not measured).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

FAST_P = (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)


def _speedup(row: Mapping[str, Any]) -> float | None:
    s = row.get("speedup")
    return float(s) if s is not None and math.isfinite(float(s)) and float(s) > 0 else None


def summarise(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics for one group of task rows."""
    n = len(rows)
    correct = [r for r in rows if r.get("status") == "correct"]
    timed = [s for s in (_speedup(r) for r in correct) if s is not None]
    out: dict[str, Any] = {"tasks": n, "correct": len(correct), "timed": len(timed),
                           "correct_rate": len(correct) / n if n else 0.0}
    for p in FAST_P:
        fast = sum(1 for r in correct if (_speedup(r) or 0.0) > p) if p > 0 else len(correct)
        out[f"fast_{p:g}"] = fast / n if n else 0.0
    out["amsr"] = sum(s for s in timed if s >= 1.0) / n if n else 0.0
    out["geomean"] = math.exp(sum(math.log(s) for s in timed) / len(timed)) if timed else None
    return out


def by_level(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """{"overall": ..., "level1": ..., ...} — the table `kernelsmith bench` writes."""
    rows = list(rows)
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[str(r.get("level") or "unknown")].append(r)
    return {"overall": summarise(rows), **{k: summarise(v) for k, v in sorted(groups.items())}}
