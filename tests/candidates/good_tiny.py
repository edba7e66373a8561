"""Honest candidate for task_tiny: y = x * 1e-6 in Triton (shows the task is passable)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, x * 1e-6, mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        scale_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
