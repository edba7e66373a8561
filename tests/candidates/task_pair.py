"""Tiny test task with a tuple output: (relu(x), 2 * x)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x), 2.0 * x


batch_size = 8
dim = 300


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
