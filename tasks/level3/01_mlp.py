import torch
import torch.nn as nn


class Model(nn.Module):
    """Multi-layer perceptron: Linear -> ReLU -> Linear -> ReLU -> Linear."""

    def __init__(self, input_size, layer_sizes, output_size):
        """
        :param input_size: The number of input features
        :param layer_sizes: A list of ints containing the sizes of each hidden layer
        :param output_size: The number of output features
        """
        super(Model, self).__init__()

        layers = []
        current_input_size = input_size

        for layer_size in layer_sizes:
            layers.append(nn.Linear(current_input_size, layer_size))
            layers.append(nn.ReLU())
            current_input_size = layer_size

        layers.append(nn.Linear(current_input_size, output_size))

        self.network = nn.Sequential(*layers)

    def forward(self, x):
        """
        :param x: The input tensor, shape (batch_size, input_size)
        :return: The output tensor, shape (batch_size, output_size)
        """
        return self.network(x)


batch_size = 2048
input_size = 4096
hidden_size1 = 4096
hidden_size2 = 2048
output_size = 1024


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, [hidden_size1, hidden_size2], output_size]


# kernelsmith extensions
CPU_OVERRIDES = {"batch_size": 8, "input_size": 96, "hidden_size1": 80, "hidden_size2": 48, "output_size": 24}


def get_test_inputs():
    return [
        [torch.randn(batch_size + 5, input_size)],       # ragged batch
        [torch.randn(1, input_size)],                    # single row
        [torch.randn(batch_size, input_size) * 10.0],    # larger activations
    ]
