import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a Softmax activation over the last dimension."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies Softmax activation to the input tensor.

        Args:
            x (torch.Tensor): Input tensor of shape (batch_size, num_features).

        Returns:
            torch.Tensor: Output tensor with Softmax applied, same shape as input.
        """
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 8192


def get_inputs():
    # Scaled logits so each row has a few dominant entries (probabilities well above 1/dim).
    x = torch.randn(batch_size, dim) * 3.0
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 8, "dim": 200}


def get_test_inputs():
    return [
        [torch.randn(batch_size + 3, dim - 5)],        # ragged rows and columns
        [torch.randn(batch_size, dim) * 30.0 + 500.0], # large logits: needs max subtraction
        [torch.randn(3, 50 * dim + 7)],                # very wide rows (> one block)
        [torch.randn(batch_size, 1)],                  # single column
    ]
