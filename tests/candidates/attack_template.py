"""Template for the rebuild's attack suite (tests/test_adversarial.py fills __PRELUDE__ and __FORWARD__): an
honest ReLU kernel is at hand; the prelude runs at import, the forward body must return the output `y`."""
import os
import signal
import sys

import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=m)


def relu(x):
    y = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
    return y


__PRELUDE__


class ModelNew(nn.Module):
    def forward(self, x):
__FORWARD__
