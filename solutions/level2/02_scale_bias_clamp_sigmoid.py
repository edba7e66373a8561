import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def scale_bias_clamp_sigmoid_kernel(x_ptr, bias_ptr, y_ptr, n_elements, HW, C,
                                    scale, clamp_min, clamp_max, BLOCK: tl.constexpr):
    pid = tl.program_id(0).to(tl.int64)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    ch = (offs // HW) % C                      # channel of each element in NCHW layout
    b = tl.load(bias_ptr + ch, mask=mask, other=0.0).to(tl.float32)
    v = x * scale + b
    v = tl.minimum(tl.maximum(v, clamp_min), clamp_max)
    y = 1.0 / (1.0 + tl.exp(-v))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    """scale -> +per-channel bias -> clamp -> sigmoid in one pass (one read, one write)."""

    BLOCK = 4096

    def __init__(self, num_channels, scale, clamp_min, clamp_max):
        super(ModelNew, self).__init__()
        self.bias = nn.Parameter(torch.randn(num_channels, 1, 1))
        self.scale = float(scale)
        self.clamp_min = float(clamp_min)
        self.clamp_max = float(clamp_max)

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if n == 0:
            return y
        C = x.shape[1]
        HW = x.shape[2] * x.shape[3]
        grid = (triton.cdiv(n, self.BLOCK),)
        scale_bias_clamp_sigmoid_kernel[grid](
            x, self.bias.contiguous(), y, n, HW, C,
            self.scale, self.clamp_min, self.clamp_max,
            BLOCK=self.BLOCK, num_warps=8,
        )
        return y
# EVOLVE-BLOCK-END
