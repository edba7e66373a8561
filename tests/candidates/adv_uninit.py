"""Cheat: torch.empty output and a grid one block short, so the last 352 elements are never written.

It also prints the raw bits of the first unwritten element each call ("PROBE <hex>") so the test can check
that the referee's poisoning really puts garbage there on CPU.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        n = x.numel()
        full_blocks = n // 1024  # should be triton.cdiv(n, 1024)
        bits = y.view(-1).view(torch.int32)[full_blocks * 1024].item() & 0xFFFFFFFF
        print(f"PROBE {bits:08x}", flush=True)
        relu_kernel[(full_blocks,)](x, y, n, BLOCK=1024)
        return y
