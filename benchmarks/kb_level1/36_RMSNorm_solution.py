"""RMS normalisation over dim 1 of an (N, F, *spatial) tensor: one program per (batch, block of positions),
all F features of those positions loaded at once (F is small), so x is read once and y written once."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def rms_kernel(x_ptr, y_ptr, S, F, eps, BLOCK_S: tl.constexpr, BLOCK_F: tl.constexpr):
    b = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK_S + tl.arange(0, BLOCK_S)
    feats = tl.arange(0, BLOCK_F)
    base = b.to(tl.int64) * F * S
    idx = base + feats[:, None].to(tl.int64) * S + offs[None, :]
    mask = (feats[:, None] < F) & (offs[None, :] < S)
    x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    rms = tl.sqrt(tl.sum(x * x, axis=0) / F + eps)
    tl.store(y_ptr + idx, (x / rms[None, :]).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n, f = x.shape[0], x.shape[1]
        s = x.numel() // max(1, n * f)
        y = torch.empty_like(x)
        block_f = triton.next_power_of_2(f)
        block_s = max(16, 4096 // block_f)
        rms_kernel[(triton.cdiv(s, block_s), n)](x, y, s, f, self.eps, BLOCK_S=block_s, BLOCK_F=block_f)
        return y
