"""Task loading: KernelBench files unchanged, constants overridable, bad input named clearly."""

from __future__ import annotations

import os
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


TYPED_TASK = KB_TASK.replace("total = batch_size * dim\n", "total = batch_size * dim\nscale = 0.5\nfused = True\n"
                             "mode = 'fast'\nkernel = (3, 3)\n")


@pytest.mark.parametrize(
    ("given", "constant", "expected"),
    [
        ({"batch_size": 4}, "batch_size", 4),
        ({"scale": 2}, "scale", 2.0),  # an int where the constant is a float: the float
        ({"scale": "1e-3"}, "scale", 1e-3),
        ({"fused": "false"}, "fused", False),
        ({"mode": 1}, "mode", "1"),  # `--set mode=1` where the constant is a string
        ({"kernel": [5, 5]}, "kernel", (5, 5)),
    ],
)
def test_overrides_take_the_constants_type(tmp_path: Path, given: dict, constant: str, expected) -> None:
    task = Task.load(write(tmp_path, TYPED_TASK), given)
    assert task.constants[constant] == expected and type(task.constants[constant]) is type(expected)
    module = load_module(task.source, str(task.path), f"t_typed_{constant}")
    assert getattr(module, constant) == expected


@pytest.mark.parametrize(
    ("given", "needle"),
    [
        ({"batch_size": "abc"}, "batch_size is int (16 in the task); expected an integer"),
        ({"batch_size": 2.5}, "expected an integer"),
        ({"batch_size": True}, "expected an integer"),
        ({"scale": float("nan")}, "scale is float (0.5 in the task); expected a finite number"),
        ({"scale": "inf"}, "expected a finite number"),
        ({"fused": "maybe"}, "expected a bool (True or False)"),
        ({"kernel": 5}, "expected a tuple like (3, 3)"),
        ({"kernel": ("a", 3)}, "expected an integer"),
    ],
)
def test_overrides_of_the_wrong_type_are_refused_naming_constant_and_type(tmp_path: Path, given: dict,
                                                                          needle: str) -> None:
    path = write(tmp_path, TYPED_TASK)
    with pytest.raises(TaskError) as exc:
        Task.load(path, given)
    assert str(path) in str(exc.value) and needle in str(exc.value), str(exc.value)
    assert exc.value.kind == "bad_override" and exc.value.file == str(path)


@pytest.mark.parametrize(
    "binding",
    [
        "from torch.nn import Softmax as Model",
        "import torch.nn as nn\nModel = nn.ReLU",
        "import torch.nn as nn\nModel: type = nn.ReLU",
        "try:\n    from torch.nn import ReLU as Model\nexcept ImportError:\n    Model = None",
    ],
)
def test_model_may_be_bound_any_way_python_binds_a_name(tmp_path: Path, binding: str) -> None:
    text = f"import torch\n{binding}\n\nn = 4\n\ndef get_inputs():\n    return [torch.randn(n, n)]\n\n" \
           "get_init_inputs = lambda: [1]\n"  # Softmax(dim=1); ReLU(inplace=True)
    task = Task.load(write(tmp_path, text))
    module = load_module(task.source, str(task.path), "t_bound")
    assert module.Model(*module.get_init_inputs())(*module.get_inputs()).shape == (4, 4)


def test_a_star_import_may_provide_the_required_names(tmp_path: Path) -> None:
    assert Task.load(write(tmp_path, "from mytasks.softmax import *\n")).name == "task"


def test_a_pep263_latin1_task_is_decoded_and_stays_unicode(tmp_path: Path) -> None:
    path = tmp_path / "latin.py"
    path.write_bytes(KB_TASK.replace("import torch\n", "# -*- coding: latin-1 -*-\nimport torch\nNOTE = 'café'\n", 1)
                     .encode("latin-1"))
    task = Task.load(path)
    assert "café" in task.source and task.source.startswith("# -*- coding: utf-8 -*-\n")  # same line count
    again = write(tmp_path, task.source, "again.py")  # what the referee's pool does with a request's source
    assert Task.load(again).source == task.source
    assert load_module(task.source, str(path), "t_latin").NOTE == "café"
    assert "NOTE = 'café'" in Task.load(path, {"batch_size": 2}).source


@pytest.mark.parametrize(("make", "needle", "kind"), [
    (lambda p: os.mkfifo(p), "it is a FIFO, not a regular file", "not_a_file"),
    (lambda p: p.mkdir(), "it is a directory, not a regular file", "not_a_file"),
    (lambda p: p.write_bytes(b"x = '\xff'\n"), "not valid utf-8 text (byte 0xff at offset 5)", "encoding"),
    (lambda p: p.write_text("#" * (2 << 20)), "larger than 1 MiB", "too_large"),
])
def test_only_bounded_regular_text_files_are_read(tmp_path: Path, make, needle: str, kind: str) -> None:
    path = tmp_path / "task.py"
    make(path)
    with pytest.raises(TaskError) as exc:
        Task.load(path)  # a FIFO is refused, not waited on
    assert str(exc.value).startswith(f"{path}: ") and needle in str(exc.value), str(exc.value)
    assert exc.value.kind == kind


def test_size_constants_are_the_integer_ones(tmp_path: Path) -> None:
    task = Task.load(write(tmp_path, TYPED_TASK + "\nCPU_OVERRIDES = {'dim': 8}\n_private = 3\n"), device="cpu")
    assert task.size_constants() == {"batch_size": 16, "dim": 8}  # literals only: `total` is computed
