"""CUDA candidate whose sources are computed at run time: the referee cannot compile them beforehand."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256
cuda_src = open(__file__).read().split("#" + "CUDA")[-1]

ext = load_inline(name="dyn_relu", cpp_sources="torch::Tensor relu_forward(torch::Tensor x);",
                  cuda_sources=cuda_src.replace("BLOCK", str(BLOCK)), functions=["relu_forward"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_forward(x)
