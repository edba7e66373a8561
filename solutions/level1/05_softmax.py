import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y,
                   BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    if SINGLE_PASS:
        # Whole row in registers: one read, one write.
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m = tl.max(x, axis=0)
        e = tl.exp(x - m)
        s = tl.sum(e, axis=0)
        tl.store(y_row + cols, (e / s).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        # Row too wide for registers: online (running max / rescaled sum) pass,
        # then a second pass that writes the normalized values.
        m_i = tl.full([BLOCK], -float("inf"), tl.float32)
        l_i = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m_i, x)
            alpha = tl.where(m_new == -float("inf"), 0.0, tl.exp(m_i - m_new))
            p = tl.where(m_new == -float("inf"), 0.0, tl.exp(x - m_new))
            l_i = l_i * alpha + p
            m_i = m_new
        m = tl.max(m_i, axis=0)
        l = tl.sum(tl.where(m_i == -float("inf"), 0.0, l_i * tl.exp(m_i - m)), axis=0)
        inv_l = 1.0 / l
        for start in range(0, n_cols, BLOCK):
            offs = start + cols
            mask = offs < n_cols
            x = tl.load(x_row + offs, mask=mask, other=-float("inf")).to(tl.float32)
            tl.store(y_row + offs, (tl.exp(x - m) * inv_l).to(y_ptr.dtype.element_ty), mask=mask)


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
    """Row softmax over the last dimension, one program per row."""

    def __init__(self):
        super(ModelNew, self).__init__()

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
        softmax_kernel[(n_rows,)](
            x2, y2, n_cols, x2.stride(0), y2.stride(0),
            BLOCK=block, SINGLE_PASS=single, num_warps=_num_warps(block),
        )
        return y
# EVOLVE-BLOCK-END
