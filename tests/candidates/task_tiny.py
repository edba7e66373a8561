"""Tiny test task whose outputs are tiny (|y| ~ 1e-6): all-zeros would pass any absolute tolerance >= 1e-5."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * 1e-6


batch_size = 8
dim = 300


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
