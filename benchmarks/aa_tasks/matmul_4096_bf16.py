import torch
import torch.nn as nn


class Model(nn.Module):
    """4096³ bf16 matrix product (compute bound)."""

    def forward(self, a, b):
        return a @ b


m = 4096
k = 4096
n = 4096


def get_inputs():
    return [torch.randn(m, k).to(torch.bfloat16), torch.randn(k, n).to(torch.bfloat16)]


def get_init_inputs():
    return []
