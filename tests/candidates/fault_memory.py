"""Fault: runaway allocation, 1 GB (touched) per step, forever."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = []
        while True:
            hoard.append(torch.ones(256 << 20))  # 1 GiB of float32, written so it is resident
