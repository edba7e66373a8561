"""The benchmark metrics on hand-computed examples."""

import math

import pytest

from kernelsmith.bench.metrics import by_level, summarise

ROWS = [
    {"task": "a", "level": "level1", "status": "correct", "speedup": 2.0},
    {"task": "b", "level": "level1", "status": "correct", "speedup": 0.5},
    {"task": "c", "level": "level1", "status": "incorrect", "speedup": None},
    {"task": "d", "level": "level2", "status": "correct", "speedup": 1.2},
    {"task": "e", "level": "level2", "status": "compile_error", "speedup": None},
]


def test_overall_metrics() -> None:
    m = summarise(ROWS)
    assert m["tasks"] == 5 and m["correct"] == 3 and m["correct_rate"] == pytest.approx(0.6)
    assert m["fast_0"] == pytest.approx(0.6)  # correct at any speed
    assert m["fast_1"] == pytest.approx(0.4)  # a (2.0) and d (1.2)
    assert m["fast_1.5"] == pytest.approx(0.2) and m["fast_2"] == 0.0  # "faster than 2×" is strict
    assert m["amsr"] == pytest.approx((2.0 + 1.2) / 5)  # 0.5 and the failures count as 0
    assert m["geomean"] == pytest.approx(math.exp((math.log(2) + math.log(0.5) + math.log(1.2)) / 3))


def test_per_level_and_untimed() -> None:
    t = by_level(ROWS + [{"task": "f", "level": "level3", "status": "correct", "speedup": None}])
    assert set(t) == {"overall", "level1", "level2", "level3"}
    assert t["level1"]["correct"] == 2 and t["level2"]["fast_1"] == pytest.approx(0.5)
    assert t["level3"]["geomean"] is None and t["level3"]["fast_0"] == 1.0 and t["level3"]["fast_1"] == 0.0
    assert summarise([])["correct_rate"] == 0.0
