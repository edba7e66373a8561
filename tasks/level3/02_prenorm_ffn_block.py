import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Pre-norm transformer feed-forward block:
    y = x + Linear2(GELU(Linear1(LayerNorm(x)))).
    """

    def __init__(self, d_model, d_ff):
        super(Model, self).__init__()
        self.norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_ff)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(d_ff, d_model)
        # Random affine parameters so that an implementation ignoring them cannot pass.
        with torch.no_grad():
            self.norm.weight.copy_(1.0 + 0.5 * torch.randn(d_model))
            self.norm.bias.copy_(0.5 * torch.randn(d_model))

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): Input of shape (batch_size, seq_len, d_model).

        Returns:
            torch.Tensor: Output of the same shape.
        """
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


batch_size = 8
seq_len = 1024
d_model = 1024
d_ff = 4096


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, d_ff]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 2, "seq_len": 7, "d_model": 48, "d_ff": 96}


def get_test_inputs():
    return [
        [torch.randn(batch_size, seq_len + 3, d_model)],              # ragged number of tokens
        [torch.randn(1, 1, d_model)],                                 # single token
        [torch.randn(batch_size, seq_len, d_model) * 5.0 + 2.0],      # shifted / scaled input
    ]
