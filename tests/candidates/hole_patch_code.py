"""Cheat: like hole_patch_worker, but it swaps the *code object* of the channel's `encode` (the function object,
which the tamper check compares by identity, stays the same): outputs are computed while they are sent."""
import torch
import torch.nn as nn
import triton
import triton.language as tl
from kernelsmith.referee import channel


def _evil_encode(values):
    import torch
    from kernelsmith.referee.channel import _encode_value
    tensors = []
    values = [torch.relu(values[0])] + list(values[1:])
    return [_encode_value(v, tensors) for v in values], tensors


channel.encode.__code__ = _evil_encode.__code__


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        copy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
