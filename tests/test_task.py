"""Task loading: KernelBench files unchanged, constants overridable, bad input named clearly."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kernelsmith.task import (
    Task,
    TaskError,
    TaskMissingModule,
    load_module,
    parse_overrides,
    rewrite_constants,
)

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


def test_a_star_import_may_provide_the_required_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mytasks").mkdir()
    (tmp_path / "mytasks" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))  # an installed module: a missing one is refused (below)
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


# KernelBench's own ways of writing sizes (levels 1-3): expressions, chained, unpacked (bare and in
# parentheses), tuples and constants computed from others, and a value over several lines.
SHIPPED_STYLE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features, dim, bias_shape):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(bias_shape))
    def forward(self, x):
        return x * 2 + self.bias  # line 9

M = 1024 * 2  # rows
N = 2048 * 2
height = width = 128
depth, rows, cols = 16, 32, 32
(d2, h2) = (4, 6)
features = 64
dim = features * 2
bias_shape = (features, 1, 1)
shape = (5, 6)
P, Q = shape
K = 4
K *= 2
layers = [32] * 3
CPU_OVERRIDES = {
    "M": 8,
}

def get_inputs():
    return [torch.randn(M, N)]

def get_init_inputs():
    return [features, dim, bias_shape]
'''


@pytest.mark.parametrize(("given", "expected"), [
    ({"N": 8}, {"N": 8, "M": 2048}),
    ({"height": 4}, {"height": 4, "width": 128}),
    ({"width": 4}, {"height": 128, "width": 4}),
    ({"rows": 2, "cols": 3}, {"depth": 16, "rows": 2, "cols": 3}),
    ({"h2": 1}, {"d2": 4, "h2": 1}),
    ({"features": 8}, {"features": 8, "dim": 16, "bias_shape": (8, 1, 1)}),  # computed ones follow
    ({"dim": 5}, {"features": 64, "dim": 5}),
    ({"bias_shape": [3, 1, 1]}, {"bias_shape": (3, 1, 1)}),
    ({"shape": (2, 3)}, {"P": 2, "Q": 3}),
    ({"Q": 9}, {"P": 5, "Q": 9}),
    ({"K": 3}, {"K": 3}),
    ({"layers": [4, 4]}, {"layers": [4, 4]}),  # `K *= 2` of a set constant: the value set is the value seen
])
def test_set_works_on_every_way_kernelbench_writes_a_size(tmp_path: Path, given: dict, expected: dict) -> None:
    path = write(tmp_path, SHIPPED_STYLE)
    static = Task.load(path)
    assert {k: static.constants[k] for k in ("M", "N", "height", "depth", "dim", "bias_shape", "P", "K")} == {
        "M": 2048, "N": 4096, "height": 128, "depth": 16, "dim": 128, "bias_shape": (64, 1, 1), "P": 5, "K": 8}
    task = Task.load(path, given)
    module = load_module(task.source, str(path), f"t_shipped_{len(given)}_{next(iter(given))}")
    for name, value in expected.items():
        assert getattr(module, name) == value and task.constants[name] == value, name
    assert {k: getattr(module, k) for k in task.constants} == task.constants  # the static reading is Python's
    lines = task.source.split("\n")
    assert len(lines) == len(SHIPPED_STYLE.split("\n")) and lines[8].endswith("# line 9")  # lines do not move
    assert "# rows" in task.source


def test_a_value_over_several_lines_is_replaced_in_place(tmp_path: Path) -> None:
    cpu = Task.load(write(tmp_path, SHIPPED_STYLE), device="cpu")
    assert cpu.constants["M"] == 8
    emptied = rewrite_constants(cpu.source, {"CPU_OVERRIDES": {}})  # what the coach's RL rows do
    assert len(emptied.split("\n")) == len(SHIPPED_STYLE.split("\n"))
    assert load_module(emptied, "t.py", "t_emptied").CPU_OVERRIDES == {}


def test_size_constants_leave_out_the_computed_ones(tmp_path: Path) -> None:
    sizes = Task.load(write(tmp_path, SHIPPED_STYLE)).size_constants()
    assert {"M", "N", "height", "width", "rows", "features", "K"} <= set(sizes)
    assert Task.load(tmp_path / "task.py").constants["layers"] == [32, 32, 32]
    assert not {"dim", "P", "Q", "bias_shape"} & set(sizes)
    assert Task.load(tmp_path / "task.py", {"dim": 7}).size_constants()["dim"] == 7  # set: its own now


def test_set_is_a_rewrite_of_the_source_not_a_run_of_it(tmp_path: Path) -> None:
    path = write(tmp_path, SHIPPED_STYLE.replace("K = 4\n", "K = len(open('/nonexistent'))\n"))
    with pytest.raises(TaskError, match="cannot set K: not a module-level constant"):
        Task.load(path, {"K": 2})  # a value known only by running code is not read, nor set
    assert Task.load(path, {"N": 2}).constants["N"] == 2
    huge = write(tmp_path, SHIPPED_STYLE.replace("N = 2048 * 2", "N = 10 ** 10 ** 10"), "huge.py")
    assert "N" not in Task.load(huge).constants  # refused, not computed


def test_a_task_importing_a_missing_extra_is_refused_naming_module_line_and_extra(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "einops", None)  # as if not installed
    path = write(tmp_path, KB_TASK.replace("import torch.nn as nn\n", "import torch.nn as nn\nfrom einops import rearrange\n"))
    with pytest.raises(TaskMissingModule) as exc:
        Task.load(path)
    assert str(exc.value) == (f"{path}:3: the task imports einops, which is not installed: install the kernelbench "
                              "extra: bash scripts/setup.sh kernelbench (or pip install 'kernelsmith[kernelbench]')")
    assert (exc.value.kind, exc.value.module, exc.value.extra, exc.value.file) == (
        "missing_module", "einops", "kernelbench", str(path))


def test_a_missing_module_anywhere_is_named_and_a_guarded_one_is_not(tmp_path: Path) -> None:
    inside = KB_TASK.replace("        return torch.softmax", "        import kernelsmith_no_such_mod.sub\n"
                             "        return torch.softmax")
    with pytest.raises(TaskMissingModule, match=r"task.py:9: the task imports kernelsmith_no_such_mod, which is "
                                                r"not installed: install the package"):
        Task.load(write(tmp_path, inside))
    guarded = "try:\n    import kernelsmith_no_such_mod\nexcept ImportError:\n    pass\n" + KB_TASK
    assert Task.load(write(tmp_path, guarded, "guarded.py")).constants["dim"] == 16384
