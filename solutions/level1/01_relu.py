import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def relu_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask)
    # `x < 0` (not `x > 0`) so that NaNs propagate like torch.relu.
    y = tl.where(x < 0, 0.0, x)
    tl.store(y_ptr + offs, y, mask=mask)


class ModelNew(nn.Module):
    """ReLU as a single memory-bound Triton pass over the flattened tensor."""

    BLOCK = 4096

    def __init__(self):
        super(ModelNew, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        grid = (triton.cdiv(n, self.BLOCK),)
        relu_kernel[grid](x, y, n, BLOCK=self.BLOCK, num_warps=8)
        return y
# EVOLVE-BLOCK-END
