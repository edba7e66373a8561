"""Task loading: KernelBench files unchanged, constants overridable, bad input named clearly."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelsmith.task import Task, TaskError, load_module, parse_overrides

KB_TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
    def forward(self, x):
        return torch.softmax(x, dim=self.dim)

batch_size = 16
dim = 16384
total = batch_size * dim

def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]

def get_init_inputs():
    return [1]
'''


def write(tmp_path: Path, text: str, name: str = "task.py") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_kernelbench_file_loads_unchanged(tmp_path: Path) -> None:
    task = Task.load(write(tmp_path, KB_TASK))
    assert task.source == KB_TASK
    assert task.constants["batch_size"] == 16 and task.constants["dim"] == 16384
    module = load_module(task.source, str(task.path), "t_unchanged")
    assert module.get_inputs()[0].shape == (16, 16384)


def test_overrides_rewrite_constants_before_execution(tmp_path: Path) -> None:
    task = Task.load(write(tmp_path, KB_TASK), parse_overrides(["batch_size=2", "dim=8"]))
    module = load_module(task.source, str(task.path), "t_override")
    assert module.get_inputs()[0].shape == (2, 8)
    assert module.total == 16  # a constant computed from others follows the override
    assert task.digest != Task.load(task.path).digest


def test_cpu_overrides_apply_only_on_cpu_and_yield_to_set(tmp_path: Path) -> None:
    path = write(tmp_path, KB_TASK + '\nCPU_OVERRIDES = {"batch_size": 4, "dim": 32}\n')
    assert Task.load(path, device="cuda").constants["dim"] == 16384
    cpu = Task.load(path, device="cpu")
    assert (cpu.constants["batch_size"], cpu.constants["dim"]) == (4, 32)
    assert Task.load(path, {"dim": 64}, device="cpu").constants["dim"] == 64


@pytest.mark.parametrize(
    ("text", "overrides", "needle"),
    [
        ("def broken(:\n", None, "syntax error"),
        ("import torch\nclass Model: pass\n", None, "missing get_inputs, get_init_inputs"),
        (KB_TASK, {"nosuch": 3}, "cannot set nosuch"),
    ],
)
def test_bad_task_errors_name_the_file_and_problem(tmp_path: Path, text, overrides, needle) -> None:
    path = write(tmp_path, text)
    with pytest.raises(TaskError) as exc:
        Task.load(path, overrides)
    assert str(path) in str(exc.value) and needle in str(exc.value)


def test_missing_task_file(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="cannot read task file"):
        Task.load(tmp_path / "absent.py")


def test_parse_overrides_values_and_errors() -> None:
    assert parse_overrides(["a=3", "b=2.5", "c=(1, 2)", "d=relu"]) == {"a": 3, "b": 2.5, "c": (1, 2), "d": "relu"}
    with pytest.raises(TaskError, match="NAME=VALUE"):
        parse_overrides(["oops"])
