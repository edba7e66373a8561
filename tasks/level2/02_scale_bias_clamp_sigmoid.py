import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Elementwise chain: multiplies by a scale, adds a per-channel bias, clamps, and
    applies a sigmoid.
    """

    def __init__(self, num_channels, scale, clamp_min, clamp_max):
        super(Model, self).__init__()
        self.bias = nn.Parameter(torch.randn(num_channels, 1, 1))
        self.scale = scale
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, num_channels, height, width).

        Returns:
            torch.Tensor: Output tensor of the same shape.
        """
        x = x * self.scale
        x = x + self.bias
        x = torch.clamp(x, min=self.clamp_min, max=self.clamp_max)
        x = torch.sigmoid(x)
        return x


batch_size = 128
num_channels = 64
height = 64
width = 64
scale = 2.0
clamp_min = -2.5
clamp_max = 1.5


def get_inputs():
    return [torch.randn(batch_size, num_channels, height, width)]


def get_init_inputs():
    return [num_channels, scale, clamp_min, clamp_max]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 2, "num_channels": 8, "height": 9, "width": 13}


def get_test_inputs():
    return [
        [torch.randn(batch_size + 1, num_channels, height + 3, width - 1)],    # ragged spatial size
        [torch.randn(batch_size, num_channels, 1, 1)],                         # 1x1 spatial
        [torch.randn(batch_size, num_channels, height, width) * 0.2],          # mostly inside the clamp range
    ]
