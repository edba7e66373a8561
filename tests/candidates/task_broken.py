"""Tiny test task whose reference fails at run time (get_inputs raises): a task fault, not the candidate's."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


batch_size = 8


def get_inputs():
    raise RuntimeError("task-broken: get_inputs cannot build its inputs")


def get_init_inputs():
    return []
