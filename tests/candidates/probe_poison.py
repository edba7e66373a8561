"""Honest ReLU that first reads (and prints as "PROBE <hex>") the bits of an output element before the kernel
writes it: the poisoning must put this call's garbage there on every call, whatever the heap's layout."""
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
        bits = y.view(-1).view(torch.int32)[(n // 1024) * 1024].item() & 0xFFFFFFFF
        print(f"PROBE {bits:08x}", flush=True)
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
