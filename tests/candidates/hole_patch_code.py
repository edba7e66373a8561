"""Cheat: like hole_patch_worker, but it swaps the *code object* of the worker's `_save` (the function object,
which the tamper check compares by identity, stays the same). The compute happens while outputs are saved,
outside the guarded call; forward only launches a copy kernel."""
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


def _evil_save(path, tensors):
    import torch

    torch.save([torch.relu(t.detach().to("cpu")) for t in tensors], path)


sys.modules["__main__"]._save.__code__ = _evil_save.__code__


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
