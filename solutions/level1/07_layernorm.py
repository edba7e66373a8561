import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                     BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    if SINGLE_PASS:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / n_cols
        diff = tl.where(mask, x - mean, 0.0)
        var = tl.sum(diff * diff, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        y = diff * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # Wide rows: mean pass, centred variance pass (numerically stable), write pass.
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / n_cols
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            d = tl.where(mask, x - mean, 0.0)
            acc += d * d
        var = tl.sum(acc, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(var + eps)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            y = (x - mean) * rstd * w + b
            tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


# Widest row (in elements) kept entirely in registers by one program.
MAX_SINGLE_BLOCK = 8192
LOOP_BLOCK = 4096


def _num_warps(block):
    if block <= 1024:
        return 4
    if block <= 4096:
        return 8
    return 16


class ModelNew(nn.Module):
    """LayerNorm over the last dimension, one program per row."""

    def __init__(self, hidden_size: int, eps: float = 1e-5):
        super(ModelNew, self).__init__()
        self.hidden_size = hidden_size
        self.eps = eps
        # Same creation order/shapes as the reference so the seeded init matches.
        self.weight = nn.Parameter(torch.randn(hidden_size))
        self.bias = nn.Parameter(torch.randn(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_cols = self.hidden_size
        n_rows = x.numel() // n_cols
        if n_rows == 0:
            return y
        x2 = x.view(n_rows, n_cols)
        y2 = y.view(n_rows, n_cols)
        block = triton.next_power_of_2(n_cols)
        single = block <= MAX_SINGLE_BLOCK
        if not single:
            block = LOOP_BLOCK
        layernorm_kernel[(n_rows,)](
            x2, self.weight.contiguous(), self.bias.contiguous(), y2,
            n_cols, x2.stride(0), y2.stride(0), self.eps,
            BLOCK=block, SINGLE_PASS=single, num_warps=_num_warps(block),
        )
        return y
# EVOLVE-BLOCK-END
