"""The library-kernel interface of the offline compiler (`kernelsmith.compiler.library`): an entry registered for an
op key turns that node into one launcher call (a fusion barrier) under strict and lenient alike; an entry that
refuses is said with the op and line under strict and falls back to the torch call under lenient; the entry sees
the node as documented (`NodeInfo`). Also the fp32 matmul precision setting and its header line.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from kernelsmith.compiler import SeedUnsupported, generate_seed, library
from kernelsmith.compiler.library import LibraryKernel, NodeInfo, TensorInfo
from kernelsmith.referee.evaluation import EvalOptions, evaluate

_HEAD = "import torch\nimport torch.nn as nn\n\n\n"

FLIP_TASK = _HEAD + '''class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w = nn.Parameter(torch.randn(c, 1))

    def forward(self, x):
        y = torch.relu(x * self.w)
        return torch.flip(y, [0, 2]) + 1.0, y.flip(1)


def get_inputs():
    return [torch.randn(2, 5, 7)]


def get_init_inputs():
    return [5]
'''

SCAN_TASK = _HEAD + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool1d(3, stride=2)

    def forward(self, x):
        return torch.logcumsumexp(self.pool(x), dim=2) * 2.0


def get_inputs():
    return [torch.randn(2, 4, 9)]


def get_init_inputs():
    return []
'''

POOL_TASK = SCAN_TASK.replace("torch.logcumsumexp(self.pool(x), dim=2) * 2.0", "self.pool(x) * 2.0")

MATMUL_TASK = _HEAD + '''class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(16, 16), torch.randn(16, 16)]


def get_init_inputs():
    return []
'''


@pytest.fixture(scope="module")
def flip_verdicts(tmp_path_factory):
    out = tmp_path_factory.mktemp("library")
    task = out / "task_flip.py"
    task.write_text(FLIP_TASK)
    jobs = {}
    for policy in ("strict", "lenient"):
        result = generate_seed(FLIP_TASK, filename=str(task), policy=policy)
        cand = out / f"seed_flip_{policy}.py"
        cand.write_text(result.source)
        jobs[policy] = (result, task, cand)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {p: pool.submit(evaluate, t, c, EvalOptions(device="cpu", timeout_s=240, policy=p))
                   for p, (_, t, c) in jobs.items()}
        return {p: (jobs[p][0], f.result()) for p, f in futures.items()}


@pytest.mark.parametrize("policy", ["strict", "lenient"])
def test_a_registered_entry_becomes_one_launcher_call(policy: str, flip_verdicts) -> None:
    result, verdict = flip_verdicts[policy]
    assert result.patterns.count("library:flip") == 2, result.patterns
    assert result.externs == []
    assert result.source.count("def _ks_flip(") == 1  # pasted once per kernel family
    assert "_ks_flip(" in result.source.split("def forward", 1)[1]
    assert verdict.status.value == "correct", f"{verdict.status.value}: {verdict.error}\n{verdict.log[-3000:]}"
    assert verdict.kernels


def _install(monkeypatch: pytest.MonkeyPatch, key: str, entry) -> None:  # noqa: ANN001
    reg = dict(library.registry())
    reg[key] = entry
    monkeypatch.setattr(library, "_registry", reg)


def test_the_entry_sees_the_node_as_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[NodeInfo] = []

    def entry(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
        seen.append(info)
        raise info.refuse("this test's entry refuses")

    _install(monkeypatch, "nn.MaxPool1d", entry)
    with pytest.raises(SeedUnsupported) as exc:
        generate_seed(POOL_TASK, filename="task.py")
    assert str(exc.value) == "task.py:11: nn.MaxPool1d (call_module pool): this test's entry refuses"
    (info,) = seen
    assert (info.key, info.kind, info.target) == ("nn.MaxPool1d", "call_module", "pool")
    assert info.module_expr == "_ks_attr(self, 'pool')"
    assert info.hyper["kernel_size"] == 3 and info.hyper["stride"] == 2
    assert info.values == (TensorInfo((2, 4, 9), torch.float32),)
    assert info.out == TensorInfo((2, 4, 4), torch.float32)
    assert len(info.args) == 1 and info.args[0].startswith("__ks_v")  # named in forward at emit time


def test_a_refusing_entry_falls_back_to_the_torch_call_under_lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, "nn.MaxPool1d", lambda info: (_ for _ in ()).throw(info.refuse("no")))
    result = generate_seed(SCAN_TASK, filename="task.py", policy="lenient")
    forward = result.source.split("def forward", 1)[1]
    assert "_ks_attr(self, 'pool')(x)" in forward and "torch.logcumsumexp(" in forward
    assert result.patterns == ["elementwise"]


def test_function_keys_name_one_builtin_once() -> None:
    """torch.conv2d is F.conv2d: one key; torch.relu and F.relu are different functions."""
    import torch.fx as fx
    import torch.nn.functional as F

    def f(x, w):  # noqa: ANN001, ANN202
        return torch.conv2d(x, w), F.conv2d(x, w), torch.relu(x), F.relu(x), x.flip(0)

    gm = fx.symbolic_trace(f)
    keys = [library.op_key(n, gm) for n in gm.graph.nodes if n.op.startswith("call")]
    assert keys == ["F.conv2d", "F.conv2d", "torch.relu", "F.relu", "Tensor.flip"]


@pytest.mark.parametrize(("precision", "dot"), [(None, "tf32x3"), ("ieee", "ieee"), ("tf32", "tf32")])
def test_the_fp32_matmul_precision_is_set_and_recorded(precision: str | None, dot: str) -> None:
    result = generate_seed(MATMUL_TASK, filename="task.py", precision=precision)
    assert f'input_precision="{dot}"' in result.source
    assert f"# kernelsmith-precision: {dot}\n" in result.source and result.precision == dot


def test_a_broken_entry_is_said_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, "Tensor.flip", lambda info: (LibraryKernel("bad", "x = 1\n", "_ks_bad"), ["x"]))
    with pytest.raises(SeedUnsupported, match=r"library kernel 'bad': its source defines no launcher _ks_bad\(\)"):
        generate_seed(FLIP_TASK, filename=str(Path("task.py")))
