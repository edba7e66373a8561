import torch
import torch.nn as nn


class Model(nn.Module):
    """RMS normalization over the last dimension: x / sqrt(mean(x^2) + eps) * weight."""

    def __init__(self, dim: int, eps: float = 1e-6):
        """
        Args:
            dim (int): Size of the normalized (last) dimension.
            eps (float): Value added to the mean square for numerical stability.
        """
        super(Model, self).__init__()
        self.eps = eps
        # Random (not ones) so that an implementation ignoring the weight cannot pass.
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, dim).

        Returns:
            torch.Tensor: RMS-normalized tensor, same shape as input.
        """
        rms = torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)
        return x / rms * self.weight


batch_size = 8192
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return [dim]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 8, "dim": 256}


def get_test_inputs():
    return [
        [torch.randn(batch_size + 7, dim)],            # ragged number of rows
        [torch.randn(batch_size, dim) * 100.0],        # large magnitudes
        [torch.randn(2, 3, dim) * 0.1],                # 3-D input, small magnitudes
    ]
