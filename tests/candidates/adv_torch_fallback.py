"""Cheat: no Triton at all, the answer comes from torch."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
