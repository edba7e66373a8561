"""GPU-only referee checks (skipped without CUDA): run on the device with `pytest tests/gpu`."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from kernelsmith.referee.evaluation import EvalOptions, evaluate
from kernelsmith.referee.verdict import Status

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

n = 16 * 1024 * 1024

def get_inputs():
    return [torch.randn(n)]

def get_init_inputs():
    return []
"""

KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def relu_kernel(x_ptr, y_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs * SCALE, tl.maximum(x, 0.0), mask=m)

def relu(x, scale=1):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, y, x.numel(), SCALE=scale, BLOCK=4096, num_warps=8)
    return y
"""

HONEST = KERNEL + """
class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
"""

SIDE_STREAM = KERNEL + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()
    def forward(self, x):
        y = torch.empty_like(x)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            for _ in range(20):
                y = relu(x)
        return y
"""

POINTER_CACHE = KERNEL + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}
    def forward(self, x):
        key = (x.data_ptr(), x.shape)
        if key not in self.cache:
            self.cache[key] = relu(x)
        return self.cache[key]
"""

ILLEGAL = KERNEL + """
class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x, scale=1 << 20)
"""


EMPTY_GRID = KERNEL + """
class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.relu(x)  # lenient allows torch; the launch below is what "at least one Triton kernel" counts
        relu_kernel[(0,)](x, y, x.numel(), SCALE=1, BLOCK=4096)  # an empty grid: nothing runs on the device
        return y
"""


def _eval(tmp_path: Path, name: str, source: str, **kw: object) -> object:
    task = tmp_path / "task.py"
    task.write_text(TASK)
    cand = tmp_path / f"{name}.py"
    cand.write_text(textwrap.dedent(source))
    return evaluate(task, cand, EvalOptions(device="cuda", timeout_s=180, timing={"budget_s": 0.5}, **kw))


def test_honest_kernel_is_timed(tmp_path: Path) -> None:
    v = _eval(tmp_path, "honest", HONEST)
    assert v.status is Status.CORRECT, (v.error, v.log)
    assert v.speedup is not None and v.speedup_ci[0] <= v.speedup <= v.speedup_ci[1]
    # the reported interval carries the between-process floor (±0.5%) around the bootstrap's own interval
    assert v.speedup_ci[1] / v.speedup_ci[0] >= 1.0099
    assert v.ref_ms > 0.01 and v.cand_ms > 0.01
    assert v.kernels == {"relu_kernel": 6}
    # the device's own trace of one call agrees: the kernel ran there, nothing unaccounted
    assert any("relu_kernel" in name for name in v.timing["device_kernels"]), v.timing
    assert not v.finding("launch_not_on_device") and not v.finding("device_trace_unavailable"), v.to_dict()
    assert not v.finding("device_kernel_unaccounted"), v.timing["device_kernels"]
    print("honest", v.to_dict())


def test_a_launch_that_runs_nothing_on_the_device_is_caught_and_the_device_agrees(tmp_path: Path) -> None:
    """KernelBench's rule (lenient) asks for a Triton launch; an empty grid launches nothing. The recorder does not
    count it, and the device's own trace of the call agrees: torch's ReLU ran there, `relu_kernel` never did."""
    v = _eval(tmp_path, "empty_grid", EMPTY_GRID, policy="lenient")
    assert v.status is Status.REJECTED and v.finding("no_triton_kernel"), v.to_dict()
    kernels = v.timing.get("device_kernels", {})
    assert kernels and not any("relu_kernel" in name for name in kernels), v.timing


def test_side_stream_work_is_rejected(tmp_path: Path) -> None:
    v = _eval(tmp_path, "side", SIDE_STREAM)
    if v.status is Status.CORRECT:  # then the 20 side-stream launches must have been timed, not hidden
        assert v.speedup < 0.5, v.to_dict()
    else:
        assert v.finding("hidden_stream_work") or v.finding("implausible_speedup"), v.to_dict()


def test_pointer_cache_is_caught(tmp_path: Path) -> None:
    v = _eval(tmp_path, "cache", POINTER_CACHE)
    assert v.status in (Status.INCORRECT, Status.REJECTED), v.to_dict()
    assert v.finding("cached_result") or v.finding("implausible_speedup"), v.to_dict()


def test_illegal_memory_access_crashes_and_next_eval_is_clean(tmp_path: Path) -> None:
    v = _eval(tmp_path, "illegal", ILLEGAL)
    assert v.status is Status.CRASHED, v.to_dict()
    assert "cuda error" in v.error.lower()
    again = _eval(tmp_path, "honest2", HONEST)
    assert again.status is Status.CORRECT, again.error


FORGED_TIMING = KERNEL + """
import kernelsmith.referee.timing as _timing

_real = _timing._summarise


def _summarise(ref_t, cand_t, *args, **kwargs):
    return _real(ref_t, cand_t / 20, *args, **kwargs)  # claim a candidate 20x faster than it ran


_timing._summarise = _summarise


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
"""


def test_forged_timing_is_caught_by_the_judges_clock(tmp_path: Path) -> None:
    """The candidate's process times itself; the judge's own wall clock around synchronised calls bounds it."""
    v = _eval(tmp_path, "forged", FORGED_TIMING)
    assert v.status is Status.REJECTED, v.to_dict()
    assert v.finding("timing_forged") or v.finding("tampering") or v.finding("implausible_speedup"), v.to_dict()


def test_candidate_runs_isolated_on_the_gpu(tmp_path: Path) -> None:
    v = _eval(tmp_path, "honest_iso", HONEST)
    assert v.status is Status.CORRECT, (v.error, v.log)
    assert v.sandbox.get("isolation") == "bwrap" and v.sandbox.get("visible_processes", 99) <= 3, v.sandbox
    assert v.timing.get("wall_bound_ms", {}).get("k", 0) >= 3, v.timing
