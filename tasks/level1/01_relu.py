import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a ReLU activation."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies ReLU activation to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of any shape.

        Returns:
            torch.Tensor: Output tensor with ReLU applied, same shape as input.
        """
        return torch.relu(x)


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
        [torch.randn(batch_size + 3, dim - 5)],        # size not a multiple of any block
        [torch.randn(batch_size, dim) * 100.0],        # large magnitudes
        [torch.randn(2, 3, dim + 1)],                  # 3-D input
    ]
