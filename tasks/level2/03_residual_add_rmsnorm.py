import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Residual add followed by RMS normalization over the last dimension:
    h = x + residual;  y = h / sqrt(mean(h^2) + eps) * weight.
    """

    def __init__(self, hidden_size, eps=1e-6):
        super(Model, self).__init__()
        self.eps = eps
        # Random (not ones) so that an implementation ignoring the weight cannot pass.
        self.weight = nn.Parameter(torch.randn(hidden_size))

    def forward(self, x, residual):
        """
        Args:
            x (torch.Tensor): Input of shape (batch_size, seq_len, hidden_size).
            residual (torch.Tensor): Residual stream of the same shape.

        Returns:
            torch.Tensor: Normalized tensor of the same shape.
        """
        h = x + residual
        rms = torch.sqrt(torch.mean(h * h, dim=-1, keepdim=True) + self.eps)
        return h / rms * self.weight


batch_size = 16
seq_len = 2048
hidden_size = 2048


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden_size)
    residual = torch.randn(batch_size, seq_len, hidden_size)
    return [x, residual]


def get_init_inputs():
    return [hidden_size]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 2, "seq_len": 6, "hidden_size": 160}


def get_test_inputs():
    return [
        [torch.randn(batch_size, seq_len + 5, hidden_size),
         torch.randn(batch_size, seq_len + 5, hidden_size)],                 # ragged rows
        [torch.randn(1, seq_len, hidden_size) * 50.0,
         torch.randn(1, seq_len, hidden_size) * 0.01],                       # unbalanced magnitudes
        [torch.randn(batch_size, seq_len, hidden_size),
         torch.randn(batch_size, seq_len, hidden_size) * 3.0 + 1.0],         # non-zero mean residual
    ]
