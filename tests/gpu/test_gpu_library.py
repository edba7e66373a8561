"""GPU-only: the offline compiler's newer library kernels compiled by Triton for the device (not interpreted) and
judged correct by the referee (skipped without CUDA): scans, triangles, cross-entropy, attention, and a
reduction of everything before a full-size op. Run on the device with `pytest tests/gpu`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelsmith.compiler import generate_seed
from kernelsmith.referee.evaluation import EvalOptions, evaluate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TASK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, a, b):
        {forward}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''

CASES = {
    "cumsum_rows": ("return torch.cumsum(a, dim=1) + b", "torch.rand(64, 5000), torch.rand(5000)"),
    "cumprod_cols": ("return torch.cumprod(1.0 + 0.001 * a, dim=0) * b", "torch.randn(300, 257), torch.rand(257)"),
    "reverse_cumsum": ("return torch.cumsum(a.flip(1), dim=1).flip(1) - b", "torch.rand(33, 3000), torch.rand(3000)"),
    "triu_matmul": ("return torch.triu(a @ b)", "torch.rand(384, 384), torch.rand(384, 384)"),
    "cross_entropy": ("return F.cross_entropy(a, b)", "torch.randn(512, 3000), torch.randint(0, 3000, (512,))"),
    "attention_causal": ("return F.scaled_dot_product_attention(a, b, b * 0.5, is_causal=True)",
                         "torch.randn(2, 4, 256, 64), torch.randn(2, 4, 256, 64)"),
    "attention_wide": ("return F.scaled_dot_product_attention(a, b, b)",
                       "torch.rand(2, 2, 128, 320), torch.rand(2, 2, 128, 320)"),
    "frobenius": ("return a / torch.norm(a, p='fro') + b", "torch.randn(1024, 4096), torch.randn(4096)"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_library_kernels_are_correct_on_the_gpu(name: str, tmp_path: Path) -> None:
    forward, inputs = CASES[name]
    source = TASK.format(forward=forward, inputs=inputs)
    task = tmp_path / f"task_{name}.py"
    task.write_text(source)
    seed = generate_seed(source, filename=str(task), policy="strict")
    cand = tmp_path / f"seed_{name}.py"
    cand.write_text(seed.source)
    v = evaluate(task, cand, EvalOptions(device="cuda", timeout_s=240, policy="strict"))
    assert v.status.value == "correct", f"{name}: {v.status.value}: {v.error}\n{v.log[-3000:]}"
    print(f"{name}: {seed.patterns} speedup {v.speedup}")
