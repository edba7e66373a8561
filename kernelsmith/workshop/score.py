"""The workshop's fitness: one number per verdict, and the rule for replacing the incumbent.

Score bands (every failing score is below every correct one, so the search is gated by correctness):

    rejected        0.0             a guard caught a cheat: below every honest failure
    crashed/timeout 0.1
    compile_error   0.2
    runtime_error   0.3
    incorrect       0.4 .. < 0.5    0.4 + 0.09 / (1 + max_rel_err): closer to the reference scores higher
    correct         1.0 + log2(speedup), clipped to [0.55, 7.0]; 1.0 when no speedup was measured (CPU)

`log2` makes the scale symmetric in ratios (2x faster = +1, 2x slower = -1) so that a few lucky outliers do not
dominate sampling; the clip keeps a slow correct kernel above every failure and caps absurd speedups at 64x
(which the referee's bandwidth floor would reject anyway).

`displaces` is the incumbent rule: a child replaces the incumbent only when it is correct and its speedup is
faster than the incumbent's beyond the referee's confidence intervals (child's lower bound above the incumbent's
upper bound). A child whose speedup lies inside the incumbent's interval is noise, not progress.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kernelsmith.referee.verdict import Status, Verdict

STAGE_SCORES: dict[str, float] = {
    Status.REJECTED.value: 0.0,
    Status.CRASHED.value: 0.1,
    Status.TIMEOUT.value: 0.1,
    Status.COMPILE_ERROR.value: 0.2,
    Status.RUNTIME_ERROR.value: 0.3,
    Status.INCORRECT.value: 0.4,
}
INCORRECT_BONUS = 0.09  # incorrect scores lie in [0.4, 0.49]
CORRECT_BASE = 1.0
CORRECT_MIN = 0.55  # a correct kernel, however slow, beats every failure
CORRECT_MAX = 1.0 + math.log2(64.0)


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def status_of(obj: Any) -> str:
    """The status of a `Verdict`, a verdict dict or anything with a `status` (enum or string)."""
    status = _get(obj, "status", "")
    return status.value if isinstance(status, Status) else str(status)


def speedup_of(obj: Any) -> float | None:
    s = _finite(_get(obj, "speedup"))
    return s if s is not None and s > 0 else None


def interval_of(obj: Any) -> tuple[float, float] | None:
    """(low, high) of the speedup confidence interval, or None when absent or malformed."""
    ci = _get(obj, "speedup_ci")
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return None
    lo, hi = _finite(ci[0]), _finite(ci[1])
    if lo is None or hi is None or lo > hi:
        return None
    return lo, hi


def score(verdict: Verdict | Mapping[str, Any] | Any) -> float:
    """Fitness of one verdict (a `Verdict` or its `to_dict()`); see the module docstring for the bands."""
    status = status_of(verdict)
    if status == Status.CORRECT.value:
        s = speedup_of(verdict)
        if s is None:
            return CORRECT_BASE
        return min(CORRECT_MAX, max(CORRECT_MIN, CORRECT_BASE + math.log2(s)))
    base = STAGE_SCORES.get(status, 0.0)  # unknown status: as low as a cheat
    if status == Status.INCORRECT.value:
        err = _finite(_get(verdict, "max_rel_err"))
        if err is not None and err >= 0:
            base += INCORRECT_BONUS / (1.0 + err)
    return base


def _score_of(obj: Any) -> float:
    s = _finite(_get(obj, "score"))
    return s if s is not None else score(obj)


def displaces(child: Any, incumbent: Any) -> bool:
    """Whether `child` should replace `incumbent` as the best program (verdicts, verdict dicts or `Program`s).

    - no incumbent: yes (unless the child is a rejected cheat);
    - an incorrect incumbent: the child must score strictly higher;
    - a correct incumbent: the child must be correct, and its speedup's lower bound (the point speedup when it
      has no interval) must exceed the incumbent's upper bound (likewise); when either has no measured speedup
      (CPU), fall back to a strictly higher score (so equal CPU-correct programs never displace each other).
    """
    if incumbent is None:
        return status_of(child) != Status.REJECTED.value
    child_ok = status_of(child) == Status.CORRECT.value
    if status_of(incumbent) != Status.CORRECT.value:
        return _score_of(child) > _score_of(incumbent)
    if not child_ok:
        return False
    c_s, i_s = speedup_of(child), speedup_of(incumbent)
    if c_s is None or i_s is None:
        return _score_of(child) > _score_of(incumbent)
    c_ci, i_ci = interval_of(child), interval_of(incumbent)
    child_low = c_ci[0] if c_ci else c_s
    incumbent_high = i_ci[1] if i_ci else i_s
    return child_low > incumbent_high
