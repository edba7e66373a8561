import torch
import torch.nn as nn


class Model(nn.Module):
    """Simple model that performs a single matrix multiplication (C = A * B) in float16."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        """
        Performs matrix multiplication.

        Args:
            A (torch.Tensor): float16 input tensor of shape (M, K).
            B (torch.Tensor): float16 input tensor of shape (K, N).

        Returns:
            torch.Tensor: float16 output tensor of shape (M, N).
        """
        return torch.matmul(A, B)


M = 4096
N = 4096
K = 4096


def get_inputs():
    A = torch.randn(M, K, dtype=torch.float16)
    B = torch.randn(K, N, dtype=torch.float16)
    return [A, B]


def get_init_inputs():
    return []  # No special initialization inputs needed


# kernelsmith extensions
CPU_OVERRIDES = {"M": 64, "N": 48, "K": 80}


def get_test_inputs():
    return [
        [torch.randn(M + 3, K - 5, dtype=torch.float16),
         torch.randn(K - 5, N + 7, dtype=torch.float16)],           # ragged M, N, K
        [torch.randn(M // 2 + 1, K + 1, dtype=torch.float16),
         torch.randn(K + 1, N // 4 + 3, dtype=torch.float16)],      # rectangular
        [torch.randn(17, K, dtype=torch.float16),
         torch.randn(K, N, dtype=torch.float16)],                    # skinny M
    ]
