"""A task's judge is kept between evaluations (fresh seeds, inputs and reference each time); what one candidate
does to its conversation with the judge never reaches the next candidate's verdict."""

from __future__ import annotations

from pathlib import Path

from conftest import CANDIDATES, TASK_RELU

from kernelsmith.referee.evaluation import EvalOptions, evaluate
from kernelsmith.referee.verdict import Status

GOOD = CANDIDATES / "good_relu.py"

# Breaks the protocol from inside forward: answers the judge out of turn, on the raw descriptor of its channel,
# with a message naming tensors in an arena it never sent.
HOSTILE = '''import json, os
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.where(x < 0, 0.0, x), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        header = {"op": "output", "case": "trial0", "n_outputs": 1, "arena": True, "values": [{"t": 0}],
                  "tensors": [{"dtype": "float32", "shape": [1 << 30], "offset": 0, "nbytes": 4 << 30}]}
        os.write(int(os.environ.get("KERNELSMITH_FD", "3")), json.dumps(header).encode())
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
        return y
'''


def _opts() -> EvalOptions:
    return EvalOptions(device="cpu", policy="lenient", timeout_s=120)


def test_the_judge_is_kept_and_each_evaluation_is_fresh() -> None:
    first = evaluate(TASK_RELU, GOOD, _opts())
    second = evaluate(TASK_RELU, GOOD, _opts())
    assert first.status is Status.CORRECT and second.status is Status.CORRECT, (first.error, second.error)
    assert second.timing["judge"] == "kept"
    assert first.trials == second.trials == 5


def test_another_task_gets_another_judge(tmp_path: Path) -> None:
    evaluate(TASK_RELU, GOOD, _opts())
    other = tmp_path / "task_relu_copy.py"
    other.write_text(TASK_RELU.read_text() + "\n# another task, byte for byte\n")
    v = evaluate(other, GOOD, _opts())
    assert v.status is Status.CORRECT and v.timing["judge"] == "new"


def test_a_hostile_candidate_leaves_nothing_for_the_next(tmp_path: Path) -> None:
    hostile = tmp_path / "hostile.py"
    hostile.write_text(HOSTILE)
    bad = evaluate(TASK_RELU, hostile, _opts())
    assert bad.status is not Status.CORRECT, bad.log
    after = evaluate(TASK_RELU, GOOD, _opts())
    assert after.status is Status.CORRECT, after.error + after.log
    assert after.trials == 5
