import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Simple model that performs a GELU activation (exact, erf-based)."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies GELU activation to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of any shape.

        Returns:
            torch.Tensor: Output tensor with GELU applied, same shape as input.
        """
        return F.gelu(x)


batch_size = 4096
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 8, "dim": 200}


def get_test_inputs():
    return [
        [torch.randn(batch_size + 1, dim - 3)],        # ragged size
        [torch.randn(batch_size, dim) * 8.0],          # tails of the erf
        [torch.randn(5, dim + 7) * 0.01],              # near zero
    ]
