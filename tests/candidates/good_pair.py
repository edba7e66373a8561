"""Honest candidate for task_pair: one kernel writes both outputs of the tuple."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def pair_kernel(x_ptr, a_ptr, b_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(a_ptr + offs, tl.maximum(x, 0.0), mask=m)
    tl.store(b_ptr + offs, 2.0 * x, mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        a = torch.empty_like(x)
        b = torch.empty_like(x)
        n = x.numel()
        pair_kernel[(triton.cdiv(n, 1024),)](x, a, b, n, BLOCK=1024)
        return a, b
