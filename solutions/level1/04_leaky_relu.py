import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def leaky_relu_kernel(x_ptr, y_ptr, n_elements, negative_slope, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.where(x > 0, x, x * negative_slope)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    """LeakyReLU as a single Triton pass over the flattened tensor."""

    BLOCK = 4096

    def __init__(self, negative_slope: float = 0.01):
        super(ModelNew, self).__init__()
        self.negative_slope = float(negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (triton.cdiv(n, self.BLOCK),)
        leaky_relu_kernel[grid](x, y, n, self.negative_slope, BLOCK=self.BLOCK, num_warps=8)
        return y
# EVOLVE-BLOCK-END
