import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Simple model that performs a SiLU (Swish) activation on a bfloat16 tensor."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Applies SiLU activation, x * sigmoid(x), to the input tensor.

        Args:
            x (torch.Tensor): bfloat16 input tensor of any shape.

        Returns:
            torch.Tensor: bfloat16 output tensor with SiLU applied, same shape as input.
        """
        return F.silu(x)


batch_size = 4096
dim = 16384


def get_inputs():
    x = torch.randn(batch_size, dim).to(torch.bfloat16)
    return [x]


def get_init_inputs():
    return []  # No special initialization inputs needed


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 8, "dim": 200}


def get_test_inputs():
    return [
        [torch.randn(batch_size + 3, dim - 1).to(torch.bfloat16)],          # ragged size
        [(torch.randn(batch_size, dim) * 20.0).to(torch.bfloat16)],         # saturating sigmoid
        [torch.randn(3, 5, dim + 3).to(torch.bfloat16)],                    # 3-D input
    ]
