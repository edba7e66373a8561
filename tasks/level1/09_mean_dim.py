import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a mean reduction over a specified dimension."""

    def __init__(self, dim: int):
        """
        Args:
            dim (int): The dimension to reduce over.
        """
        super(Model, self).__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Reduces the input tensor along the specified dimension by taking the mean.

        Args:
            x (torch.Tensor): Input tensor of arbitrary shape.

        Returns:
            torch.Tensor: Output tensor with the reduced dimension removed.
        """
        return torch.mean(x, dim=self.dim)


batch_size = 64
dim1 = 2048
dim2 = 512
reduce_dim = 1


def get_inputs():
    # Offset so that the means are not all near zero.
    x = torch.randn(batch_size, dim1, dim2) + torch.rand(batch_size, 1, dim2) * 4.0 - 2.0
    return [x]


def get_init_inputs():
    return [reduce_dim]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 4, "dim1": 100, "dim2": 24}


def get_test_inputs():
    return [
        [torch.randn(batch_size, dim1 + 3, dim2 - 1) + 1.0],          # ragged reduced and kept dims
        [torch.randn(batch_size + 1, dim1, 1) * 10.0 + 3.0],         # single trailing column
        [torch.randn(2, 1, dim2 + 5) - 2.0],                         # reduced dim of size 1
    ]
