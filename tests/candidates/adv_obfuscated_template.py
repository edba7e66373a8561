"""Cheat template: a decoy Triton kernel, then torch compute spelled so no source regex would see it.

The test replaces __COMPUTE__ with one spelling (getattr(torch, "re" + "lu")(x), torch.ops.aten..., F.relu, an
nn.ReLU submodule, ...) and writes the result to a temporary file.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: F401 - used by some spellings
import triton
import triton.language as tl


@triton.jit
def decoy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        scratch = torch.empty_like(x)
        decoy_kernel[(triton.cdiv(x.numel(), 1024),)](x, scratch, x.numel(), BLOCK=1024)
        return __COMPUTE__
