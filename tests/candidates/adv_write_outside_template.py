"""Cheat: plant a file outside the work dir at import (a root candidate could rewrite the referee itself)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

with open("__TARGET__", "w") as fh:
    fh.write("planted by a candidate\n")


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
