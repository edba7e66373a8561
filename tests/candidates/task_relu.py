"""Tiny test task: ReLU on an (8, 300) float32 tensor (2400 elements: the last 1024-block is partial)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 8
dim = 300


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
