"""A correct Triton kernel, but defined in another file (written at import): not the candidate's own kernel."""
import importlib
import os
import sys

import torch
import torch.nn as nn
import triton

_SRC = '''
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)
'''
_dir = os.path.join(os.getcwd(), "tmp", "foreign")
os.makedirs(_dir, exist_ok=True)
with open(os.path.join(_dir, "foreign_relu.py"), "w") as fh:
    fh.write(_SRC)
sys.path.insert(0, _dir)
relu_kernel = importlib.import_module("foreign_relu").relu_kernel


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
