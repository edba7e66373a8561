import torch
import torch.nn as nn
import triton
import triton.language as tl


# EVOLVE-BLOCK-START
@triton.jit
def mean_dim_kernel(x_ptr, y_ptr, R, INNER, inv_r,
                    BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    # x is viewed as (outer, R, INNER); reduce over R, keep (outer, INNER).
    pid_o = tl.program_id(0).to(tl.int64)
    pid_n = tl.program_id(1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_r = tl.arange(0, BLOCK_R)
    mask_n = offs_n < INNER
    base = x_ptr + pid_o * R * INNER
    acc = tl.zeros([BLOCK_R, BLOCK_N], tl.float32)
    for r0 in range(0, R, BLOCK_R):
        rr = r0 + offs_r
        ptrs = base + rr[:, None].to(tl.int64) * INNER + offs_n[None, :]
        mask = (rr[:, None] < R) & mask_n[None, :]
        acc += tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=0)
    tl.store(y_ptr + pid_o * INNER + offs_n, (total * inv_r).to(y_ptr.dtype.element_ty), mask=mask_n)


class ModelNew(nn.Module):
    """Mean over an arbitrary dim: tile (reduced rows x contiguous inner columns), fp32 accumulation."""

    TILE = 4096  # elements per loop iteration per program

    def __init__(self, dim: int):
        super(ModelNew, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dim = self.dim % x.dim()
        shape = list(x.shape)
        R = shape[dim]
        outer = 1
        for s in shape[:dim]:
            outer *= s
        inner = 1
        for s in shape[dim + 1:]:
            inner *= s
        out_shape = shape[:dim] + shape[dim + 1:]
        y = torch.empty(out_shape, dtype=x.dtype, device=x.device)
        if outer * inner == 0:
            return y
        x = x.contiguous()
        block_n = min(triton.next_power_of_2(inner), 64)
        block_r = max(1, min(self.TILE // block_n, triton.next_power_of_2(max(R, 1))))
        grid = (outer, triton.cdiv(inner, block_n))
        mean_dim_kernel[grid](
            x, y, R, inner, 1.0 / R if R > 0 else float("nan"),
            BLOCK_R=block_r, BLOCK_N=block_n, num_warps=4,
        )
        return y
# EVOLVE-BLOCK-END
