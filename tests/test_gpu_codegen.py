"""The offline compiler's kernels compile for an H100/H200 (sm_90), checked on a machine without a GPU.

The CPU tests run kernels in Triton's interpreter, which never lowers them; a kernel can pass all of them and
fail to compile on the device, where each failure costs scarce device time. Per template family, a CPU-sized
task's strict seed runs once in the interpreter (noting each launch's argument types, constexprs, warps and
stages), then every noted launch is compiled ahead of time for `cuda:90` (`benchmarks/gpu_codegen.py`). Skipped
where Triton has no NVIDIA backend or ptxas.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith.compiler import generate_seed

HELPER = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_codegen.py"

TASK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, {args}):
        {forward}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''

# name -> (module lines for __init__, forward's parameters, forward body, inputs, the seed's kernels must include)
CASES = {
    "matmul_split_k_bias_gelu": ("self.fc = nn.Linear(1536, 24)", "x", "return F.gelu(self.fc(x))",
                                 "torch.randn(8, 1536)", "matmul_epilogue"),
    "bmm_fp16": ("", "a, b", "return torch.bmm(a, b) * 0.5",
                 "torch.randn(3, 32, 64).half(), torch.randn(3, 64, 48).half()", "matmul_epilogue"),
    "softmax_rows": ("", "x", "return torch.softmax(x * 2.0, dim=-1)", "torch.randn(16, 300)", "reduction"),
    "sum_of_everything": ("", "x", "return x / torch.norm(x, p='fro') + 1.0", "torch.randn(64, 96)",
                          "reduction"),
    "layernorm_rows": ("self.ln = nn.LayerNorm(512)", "x", "return self.ln(x)", "torch.randn(4, 512)", "reduction"),
    "layernorm_split": ("self.ln = nn.LayerNorm((8, 64, 64))", "x", "return self.ln(x)", "torch.randn(2, 8, 64, 64)",
                        "library:norm"),
    "groupnorm_relu": ("self.gn = nn.GroupNorm(4, 8)", "x", "return torch.relu(self.gn(x))",
                       "torch.randn(2, 8, 6, 6)", "library:norm"),
    "batchnorm_eval": ("self.bn = nn.BatchNorm2d(8).eval()", "x", "return self.bn(x) + 1.0",
                       "torch.randn(2, 8, 5, 5)", "library:norm"),
    "conv2d_bias_relu": ("self.conv = nn.Conv2d(4, 8, 3, padding=1)", "x", "return torch.relu(self.conv(x))",
                         "torch.randn(2, 4, 9, 9)", "library:conv"),
    "conv2d_depthwise_strided": ("self.conv = nn.Conv2d(6, 6, 3, stride=2, groups=6)", "x", "return self.conv(x)",
                                 "torch.randn(1, 6, 11, 11)", "library:conv"),
    "conv_transpose3d": ("self.conv = nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1)", "x",
                         "return self.conv(x)", "torch.randn(1, 3, 4, 4, 4)", "library:conv"),
    "maxpool_avgpool": ("self.mp = nn.MaxPool2d(2)\n        self.ap = nn.AvgPool2d(3, stride=1, padding=1)", "x",
                        "return self.ap(self.mp(x))", "torch.randn(2, 3, 8, 8)", "library:pool"),
    "cumsum": ("", "x", "return torch.cumsum(x, dim=1)", "torch.randn(4, 700)", "library:scan"),
    "triu": ("", "x", "return torch.triu(x) * 2.0", "torch.randn(40, 40)", "library:tri"),
    "cross_entropy": ("", "x, t", "return F.cross_entropy(x, t)", "torch.randn(16, 50), torch.randint(0, 50, (16,))",
                      "library:xent"),
    "attention_causal": ("", "q, k", "return F.scaled_dot_product_attention(q, k, k * 0.5, is_causal=True)",
                         "torch.randn(1, 2, 32, 16), torch.randn(1, 2, 32, 16)", "library:attn"),
    "attention_wide_features": ("", "q, k", "return F.scaled_dot_product_attention(q, k, k)",
                                "torch.randn(1, 1, 16, 320), torch.randn(1, 1, 16, 320)", "library:attn"),
}


def _run(*args: str, interpret: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(HELPER), *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope="module")
def nvidia_backend(tmp_path_factory) -> None:
    """Skip unless this Triton can compile for NVIDIA here (its backend and ptxas are in the wheel)."""
    probe = tmp_path_factory.mktemp("probe")
    (probe / "prog.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x, n, BLOCK: tl.constexpr):\n"
        "    i = tl.arange(0, BLOCK)\n    tl.store(x + i, tl.load(x + i, mask=i < n) + 1.0, mask=i < n)\n")
    (probe / "l.json").write_text(json.dumps([{"kernel": "k", "signature": {"x": "*fp32", "n": "i32",
                                  "BLOCK": "constexpr"}, "constexprs": {"BLOCK": 128}, "num_warps": 4,
                                  "num_stages": 3}]))
    got = _run("compile", str(probe / "prog.py"), str(probe / "l.json"), interpret=False)
    if got.returncode:
        pytest.skip(f"Triton cannot compile for NVIDIA here: {(got.stdout + got.stderr)[-300:]}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_seed_kernels_compile_for_sm90(name: str, nvidia_backend: None, tmp_path: Path) -> None:
    init, args, forward, inputs, family = CASES[name]
    source = TASK.format(init=f"        {init}" if init else "        pass", args=args, forward=forward,
                         inputs=inputs)
    task = tmp_path / "task.py"
    task.write_text(source)
    seed = generate_seed(source, filename=str(task), policy="strict")
    assert family in seed.patterns, seed.patterns
    program = tmp_path / "program.py"
    program.write_text(seed.source)
    launches = tmp_path / "launches.json"
    got = _run("record", str(task), str(program), str(launches), interpret=True)
    assert got.returncode == 0, got.stderr[-3000:]
    noted = json.loads(launches.read_text())
    assert noted, "the seed launched no Triton kernel"
    got = _run("compile", str(program), str(launches), interpret=False)
    results = [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")]
    failed = [r for r in results if not r["ok"]]
    assert got.returncode == 0 and len(results) == len(noted) and not failed, (failed, got.stderr[-2000:])
