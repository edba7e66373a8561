"""Fault: imports a module that does not exist."""
import torch.nn as nn
import kernelsmith_no_such_module_xyz  # noqa: F401


class ModelNew(nn.Module):
    def forward(self, x):
        return x
