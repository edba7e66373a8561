import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Layer normalization over the last (hidden) dimension with a learnable affine transform."""

    def __init__(self, hidden_size: int, eps: float = 1e-5):
        """
        Args:
            hidden_size (int): Size of the normalized (last) dimension.
            eps (float): Value added to the variance for numerical stability.
        """
        super(Model, self).__init__()
        self.hidden_size = hidden_size
        self.eps = eps
        # Random (not ones/zeros) so that an implementation ignoring them cannot pass.
        self.weight = nn.Parameter(torch.randn(hidden_size))
        self.bias = nn.Parameter(torch.randn(hidden_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, seq_len, hidden_size).

        Returns:
            torch.Tensor: Normalized tensor, same shape as input.
        """
        return F.layer_norm(x, (self.hidden_size,), self.weight, self.bias, self.eps)


batch_size = 16
seq_len = 2048
hidden_size = 1024


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden_size)
    return [x]


def get_init_inputs():
    return [hidden_size]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 2, "seq_len": 5, "hidden_size": 200}


def get_test_inputs():
    return [
        [torch.randn(batch_size, seq_len + 3, hidden_size)],           # ragged number of rows
        [torch.randn(batch_size, seq_len, hidden_size) * 20.0 + 7.0],  # large mean and variance
        [torch.randn(1, seq_len, hidden_size) * 1e-2],                 # small variance
    ]
