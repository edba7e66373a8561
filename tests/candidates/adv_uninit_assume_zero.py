"""Bug/cheat: torch.empty output, and the kernel stores only the positive results, assuming memory is zero.

Correct whenever the allocator happens to hand out zeroed memory; only poisoned output memory shows it.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_positive_only_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0.0)
    tl.store(y_ptr + offs, x, mask=m & (x > 0))


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_positive_only_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
