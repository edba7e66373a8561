"""The RL reward: stage ordering, batching through a pluggable evaluator, the service hook, and the real referee
(local thread-pool evaluator, verl's compute_score) on the shipped ReLU task at CPU size."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from kernelsmith.coach.reward import (
    EVALUATOR_ERROR,
    UNPARSEABLE,
    KernelReward,
    compute_score,
    reward_for,
)
from kernelsmith.coach.rl import effective_task_source
from kernelsmith.task import Task

ROOT = Path(__file__).resolve().parents[1]
RELU = (ROOT / "tasks/level1/01_relu.py").read_text()
SOLUTION = (ROOT / "solutions/level1/01_relu.py").read_text()
WRONG = SOLUTION.replace("tl.where(x < 0, 0.0, x)", "tl.where(x < 0, 0.5, x)")
CPU_RELU = effective_task_source(RELU, {}, "cpu", "01_relu")


def fenced(code: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": f"Here:\n```python\n{code}\n```"}]


def columns(n: int, parent: str = "", parent_speedup: float | None = None) -> dict[str, list]:
    opts = json.dumps({"device": "cpu", "policy": "strict", "timeout_s": 120.0})
    return {"task_source": [CPU_RELU] * n, "task_name": ["01_relu"] * n, "parent_code": [parent] * n,
            "parent_speedup": [parent_speedup] * n, "parent_status": [""] * n, "eval_options": [opts] * n,
            "response_mode": ["full"] * n}


def test_stage_order() -> None:
    order = ["rejected", UNPARSEABLE, "compile_error", "runtime_error", "incorrect", "correct"]
    values = [reward_for(s) for s in order]
    assert values == sorted(values) and len(set(values)) == len(values)
    assert reward_for("timeout") == reward_for("crashed") == reward_for("runtime_error")
    assert reward_for("correct", 0.01, 1.0) > reward_for("incorrect")  # clipped: slow but correct beats failures
    assert reward_for("correct", 2.0, 1.0) == pytest.approx(1.5)  # 0.5 + log2(2)
    assert reward_for("correct", 1000.0, 1.0) == pytest.approx(3.5)  # clip
    assert reward_for("correct", 3.0, 1.5) == reward_for("correct", 2.0, 1.0)  # relative to the parent
    assert reward_for("correct", None, 1.0) == reward_for("correct", 2.0, None) == 0.5  # unmeasured (CPU)
    assert reward_for("something new") == reward_for("rejected")


class FakeEvaluator:
    def __init__(self, verdicts: dict[str, dict]):
        self.verdicts, self.calls = verdicts, []

    def __call__(self, items):
        self.calls.append(items)
        return [next(v for k, v in self.verdicts.items() if k in src) for _, src, _ in items]


def test_batching_dedup_and_records() -> None:
    fake = FakeEvaluator({"0.5, x": {"status": "incorrect"}, "0.0, x": {"status": "correct", "speedup": 3.0}})
    reward = KernelReward(fake, device="cpu")
    comps = [fenced(SOLUTION), "no code here", fenced(WRONG), fenced(SOLUTION + "\n# same program\n")]
    metrics = {}
    out = reward(prompts=[[]] * 4, completions=comps, log_metric=lambda k, v: metrics.__setitem__(k, v),
                 **columns(4, parent=SOLUTION, parent_speedup=1.5))
    assert out == [pytest.approx(1.5), reward_for(UNPARSEABLE), reward_for("incorrect"), pytest.approx(1.5)]
    assert len(fake.calls) == 1 and len(fake.calls[0]) == 2  # one batch; the duplicate program judged once
    task_source, _, options = fake.calls[0][0]
    assert task_source == CPU_RELU and options["task_name"] == "01_relu" and options["device"] == "cpu"
    assert [r["judged"] for r in reward.history] == [True, False, True, True]
    assert reward.counts == {"correct": 2, UNPARSEABLE: 1, "incorrect": 1} and reward.evaluations == 2
    assert metrics == {"kernelsmith/correct_frac": 0.5, "kernelsmith/parsed_frac": 0.75}
    assert reward.__name__ == "kernelsmith_reward"


def test_verl_ground_truth_columns() -> None:
    fake = FakeEvaluator({"": {"status": "compile_error"}})
    spec = {k: v[0] for k, v in columns(1).items()}
    out = KernelReward(fake)(prompts=[None], completions=[SOLUTION],
                             reward_model=[{"style": "rule", "ground_truth": json.dumps(spec)}])
    assert out == [reward_for("compile_error")]


def test_evaluator_errors() -> None:
    broken = FakeEvaluator({"": {"status": EVALUATOR_ERROR, "error": "service down"}})
    with pytest.raises(RuntimeError, match="service down"):
        KernelReward(broken)(prompts=[None], completions=[fenced(SOLUTION)], **columns(1))
    tolerant = KernelReward(broken, on_evaluator_error="none")
    assert tolerant(prompts=[None, None], completions=[fenced(SOLUTION), "x"], **columns(2)) == [
        None, reward_for(UNPARSEABLE)]
    with pytest.raises(ValueError, match="task_source"):
        KernelReward(broken)(prompts=[None], completions=["x"])


def test_service_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    class RefereeClient:
        def __init__(self, base_url, token):
            seen["init"] = (base_url, token)

        def evaluate_many(self, items):
            seen["items"] = items
            return [{"status": "correct", "speedup": 2.0} for _ in items]

    mod = types.ModuleType("kernelsmith.referee.client")
    mod.RefereeClient = RefereeClient
    monkeypatch.setitem(sys.modules, "kernelsmith.referee.client", mod)
    reward = KernelReward(service_url="http://referee:8000", token="t0k")
    assert reward(prompts=[None], completions=[fenced(SOLUTION)], **columns(1)) == [pytest.approx(1.5)]
    assert seen["init"] == ("http://referee:8000", "t0k")
    (item,) = seen["items"]
    assert set(item) == {"task_source", "task_name", "candidate_source", "options"}
    assert item["task_name"] == "01_relu" and "task_name" not in item["options"]
    assert item["options"]["device"] == "cpu" and "class ModelNew" in item["candidate_source"]


def test_effective_task_source_is_self_contained(tmp_path: Path) -> None:
    p = tmp_path / "01_relu.py"
    p.write_text(CPU_RELU)
    for device in ("cpu", "cuda"):
        t = Task.load(p, device=device)
        assert t.constants["batch_size"] == 8 and t.constants["dim"] == 200  # no second CPU_OVERRIDES
    big = effective_task_source(RELU, {"dim": 300}, "cuda", "01_relu")
    p.write_text(big)
    assert Task.load(p, device="cpu").constants["dim"] == 300


def test_real_referee_local_and_verl() -> None:
    """Three completions through the referee at once (two evaluations), then verl's entry point."""
    reward = KernelReward(max_workers=2)
    out = reward(prompts=[None] * 3, completions=[fenced(SOLUTION), fenced(WRONG), "I cannot help."],
                 **columns(3))
    assert [r["status"] for r in reward.history] == ["correct", "incorrect", UNPARSEABLE]
    assert out == [reward_for("correct"), reward_for("incorrect"), reward_for(UNPARSEABLE)]
    assert reward.evaluations == 2
    spec = {k: v[0] for k, v in columns(1).items()}
    score = compute_score("kernelsmith/01_relu", f"```python\n{SOLUTION}\n```", json.dumps(spec), {})
    assert score == reward_for("correct")
