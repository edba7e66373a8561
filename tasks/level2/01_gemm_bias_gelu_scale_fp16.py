import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """
    float16 Linear layer (GEMM + bias), followed by tanh-approximated GELU and a
    multiplication by a constant scaling factor.
    """

    def __init__(self, in_features, out_features, scaling_factor):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features, dtype=torch.float16)
        self.scaling_factor = scaling_factor

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): float16 input tensor of shape (batch_size, in_features).

        Returns:
            torch.Tensor: float16 output tensor of shape (batch_size, out_features).
        """
        x = self.linear(x)
        x = F.gelu(x, approximate="tanh")
        x = x * self.scaling_factor
        return x


batch_size = 4096
in_features = 4096
out_features = 4096
scaling_factor = 1.5


def get_inputs():
    return [torch.randn(batch_size, in_features, dtype=torch.float16)]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 40, "in_features": 72, "out_features": 56}


def get_test_inputs():
    return [
        [torch.randn(batch_size + 3, in_features, dtype=torch.float16)],        # ragged M
        [torch.randn(7, in_features, dtype=torch.float16)],                     # skinny M
        [torch.randn(batch_size, in_features, dtype=torch.float16) * 4.0],      # larger pre-activations
    ]
