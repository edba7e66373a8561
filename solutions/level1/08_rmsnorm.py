import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, n_cols, stride_x, stride_y, eps,
                   BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    if SINGLE_PASS:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        ms = tl.sum(x * x, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(ms + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
            acc += x * x
        ms = tl.sum(acc, axis=0) / n_cols
        rstd = 1.0 / tl.sqrt(ms + eps)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


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
    """RMSNorm over the last dimension, one program per row."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super(ModelNew, self).__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols if n_cols > 0 else 0
        if n_rows == 0:
            return y
        x2 = x.view(n_rows, n_cols)
        y2 = y.view(n_rows, n_cols)
        block = triton.next_power_of_2(n_cols)
        single = block <= MAX_SINGLE_BLOCK
        if not single:
            block = LOOP_BLOCK
        rmsnorm_kernel[(n_rows,)](
            x2, self.weight.contiguous(), y2, n_cols, x2.stride(0), y2.stride(0), self.eps,
            BLOCK=block, SINGLE_PASS=single, num_warps=_num_warps(block),
        )
        return y
# EVOLVE-BLOCK-END
