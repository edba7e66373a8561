"""Cheat: a decoy kernel, the answer from numpy (Tensor.numpy / torch.from_numpy never reach the dispatcher).
On CUDA the .cpu() copy would be a host_transfer; on CPU nothing sees it."""
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def decoy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty_like(x)
        decoy_kernel[(triton.cdiv(x.numel(), 1024),)](x, scratch, x.numel(), BLOCK=1024)
        return torch.from_numpy(np.maximum(x.numpy(), 0))
