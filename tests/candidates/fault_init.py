"""Fault: ModelNew's constructor raises."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("boom-in-init: hidden size must be even")

    def forward(self, x):
        return x
