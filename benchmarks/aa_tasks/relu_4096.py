import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU of 4096 fp32 values (launch bound)."""

    def forward(self, x):
        return torch.relu(x)


n = 4096


def get_inputs():
    return [torch.randn(n)]


def get_init_inputs():
    return []
