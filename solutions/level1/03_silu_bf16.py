import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def silu_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    # Compute in fp32, round once to the output dtype (bf16) on the store.
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = x / (1.0 + tl.exp(-x))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """SiLU on bf16 data: bf16 in/out, fp32 math in registers."""

    BLOCK = 8192  # 16 bytes per thread per load with 8 warps for 2-byte elements

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (triton.cdiv(n, self.BLOCK),)
        silu_kernel[grid](x, y, n, BLOCK=self.BLOCK, num_warps=8)
        return y
# EVOLVE-BLOCK-END
