import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise add of two 64M-element fp32 vectors (memory bound)."""

    def forward(self, a, b):
        return a + b


n = 64 * 1024 * 1024


def get_inputs():
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs():
    return []
