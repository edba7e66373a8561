"""A user's own model for `benchmarks/optimize_models.py`: a transformer's feed-forward block as one would write
it (pre-norm, GELU MLP, layer scale, residual), in KernelBench format so `kernelsmith optimize` can read it.

The sizes are module-level constants so `--set` can shrink them (the CPU smoke test); at the defaults (64 x 512
tokens of width 1024, fp32) one forward is two ~137 GFLOP matmuls: measurable on an H200.
"""

import torch
import torch.nn as nn


class FeedForward(nn.Module):
    """Linear -> GELU -> Linear, through a `hidden`-wide layer."""

    def __init__(self, dim: int, hidden: int, dropout: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Model(nn.Module):
    """y = x + gamma * FeedForward(LayerNorm(x)): the MLP half of a pre-norm transformer layer."""

    def __init__(self, dim: int, hidden: int, layer_scale: float):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = FeedForward(dim, hidden)
        self.gamma = nn.Parameter(layer_scale * torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gamma * self.mlp(self.norm(x))


batch_size = 64
seq_len = 512
dim = 1024
mlp_ratio = 4
hidden = dim * mlp_ratio
layer_scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, hidden, layer_scale]
