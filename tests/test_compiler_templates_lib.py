"""Library kernels for the strict policy (issue 17): convolution, pooling, batch/group/instance norm.

Each entry is reached through the public registry (`kernelsmith.compiler.library.registry()`) with the
`NodeInfo` the lowering would give it; its kernel source is written to a module (with the helpers every
generated program has), its launcher called with the entry's own argument expressions against a real torch
module or functional call, and the result compared with torch on the CPU (Triton's interpreter). A generated
seed using all three families is judged by the real referee under `--policy strict`.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

os.environ.setdefault("TRITON_INTERPRET", "1")

from kernelsmith.compiler import SeedUnsupported, generate_seed  # noqa: E402
from kernelsmith.compiler.library import LibraryKernel, NodeInfo, TensorInfo, registry  # noqa: E402
from kernelsmith.compiler.templates.common import IMPORTS, JIT_HELPERS, PY_HELPERS  # noqa: E402

_counter = itertools.count()


def _load(lib: LibraryKernel, tmp_path: Path) -> dict[str, Any]:
    """The kernel's source in a module of its own, as a generated program would hold it."""
    path = tmp_path / f"ks_lib_{lib.name}_{next(_counter)}.py"
    path.write_text("\n".join(IMPORTS) + "\n" + JIT_HELPERS + PY_HELPERS + lib.source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return vars(mod)


def _info(key: str, args: list[str], values: list[Any], module: nn.Module | None = None,
          kwargs: dict[str, str] | None = None, kwvalues: dict[str, Any] | None = None) -> NodeInfo:
    params = {}
    if module is not None:
        params = {k: None if t is None else f"self.m.{k}"
                  for k, t in [*module._parameters.items(), *module._buffers.items()]}
    return NodeInfo(key=key, kind="call_module" if module is not None else "call_function", target=key,
                    args=tuple(args), kwargs=kwargs or {}, values=tuple(values), kwvalues=kwvalues or {},
                    out=None, module=module, module_expr="self.m" if module is not None else None,
                    params=params, training=bool(module is not None and module.training), where=f"task.py:1: {key}")


def _tinfo(t: torch.Tensor) -> TensorInfo:
    return TensorInfo(tuple(t.shape), t.dtype)


def _call_module(key: str, mod: nn.Module, x: torch.Tensor, tmp_path: Path) -> torch.Tensor:
    """The launcher's result for `mod(x)` through the registry entry for `key`."""
    lib, call_args = registry()[key](_info(key, ["x"], [_tinfo(x)], mod))
    ns = _load(lib, tmp_path)
    holder = nn.Module()
    holder.m = mod
    return eval(f"{lib.launcher}({', '.join(call_args)})", ns, {"self": holder, "x": x})


def _call_function(key: str, tensors: dict[str, torch.Tensor], args: list[str], kwargs: dict[str, str],
                   tmp_path: Path) -> torch.Tensor:
    """The launcher's result for `F.<fn>(*args, **kwargs)`, arguments given as expressions over `tensors`."""
    scope = {"torch": torch, **tensors}

    def value(expr: str) -> Any:
        v = eval(expr, scope)
        return _tinfo(v) if isinstance(v, torch.Tensor) else v

    info = _info(key, args, [value(a) for a in args], kwargs=kwargs,
                 kwvalues={k: value(e) for k, e in kwargs.items()})
    lib, call_args = registry()[key](info)
    ns = _load(lib, tmp_path)
    return eval(f"{lib.launcher}({', '.join(call_args)})", ns, scope)


def _close(got: torch.Tensor, want: torch.Tensor, tol: float = 1e-4) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape, got.dtype, want.dtype)
    torch.testing.assert_close(got.float(), want.float(), atol=tol, rtol=tol)


# ---------------------------------------------------------------------------------------------- convolution

CONVS = [
    ("nn.Conv1d", dict(in_channels=3, out_channels=5, kernel_size=3), (2, 3, 11)),
    ("nn.Conv1d", dict(in_channels=4, out_channels=6, kernel_size=4, stride=3, padding=2, dilation=2, groups=2,
                       bias=False), (1, 4, 17)),
    ("nn.Conv2d", dict(in_channels=3, out_channels=8, kernel_size=3, padding=1), (2, 3, 7, 9)),
    ("nn.Conv2d", dict(in_channels=4, out_channels=6, kernel_size=(2, 3), stride=(2, 1), padding=(1, 2),
                       dilation=(1, 2), groups=2), (2, 4, 9, 8)),
    ("nn.Conv2d", dict(in_channels=6, out_channels=6, kernel_size=3, stride=2, groups=6, bias=False),
     (1, 6, 9, 7)),                                                             # depthwise: direct kernel
    ("nn.Conv2d", dict(in_channels=3, out_channels=4, kernel_size=(4, 3), padding="same", dilation=2),
     (2, 3, 6, 7)),                                                             # 'same', even kernel
    ("nn.Conv2d", dict(in_channels=5, out_channels=20, kernel_size=1), (2, 5, 3, 5)),   # pointwise
    ("nn.Conv2d", dict(in_channels=12, out_channels=10, kernel_size=3, stride=2, padding=2, dilation=2,
                       groups=2), (2, 12, 7, 8)),                               # GEMM path, grouped
    ("nn.ConvTranspose2d", dict(in_channels=10, out_channels=12, kernel_size=3, stride=2, padding=1,
                                output_padding=1, groups=2, dilation=2), (1, 10, 4, 5)),
    ("nn.Conv3d", dict(in_channels=2, out_channels=4, kernel_size=(2, 3, 2), stride=(1, 2, 1), padding=1,
                       dilation=(2, 1, 1)), (2, 2, 5, 6, 4)),
    ("nn.ConvTranspose1d", dict(in_channels=3, out_channels=4, kernel_size=3, stride=2, padding=1,
                                output_padding=1, dilation=2), (2, 3, 7)),
    ("nn.ConvTranspose2d", dict(in_channels=4, out_channels=6, kernel_size=(3, 2), stride=(2, 3),
                                padding=(1, 0), output_padding=(1, 2), groups=2), (1, 4, 5, 6)),
    ("nn.ConvTranspose3d", dict(in_channels=6, out_channels=8, kernel_size=3, stride=2, padding=1,
                                output_padding=1), (2, 6, 3, 2, 3)),           # stride phases
    ("nn.ConvTranspose1d", dict(in_channels=8, out_channels=5, kernel_size=4, stride=3, padding=2,
                                output_padding=2, groups=1), (1, 8, 5)),
    ("nn.ConvTranspose2d", dict(in_channels=3, out_channels=2, kernel_size=4, stride=1, bias=False),
     (2, 3, 5, 5)),
    ("nn.ConvTranspose3d", dict(in_channels=4, out_channels=4, kernel_size=3, stride=(2, 1, 2), padding=1,
                                output_padding=(1, 0, 0), groups=4, dilation=(1, 2, 1)), (1, 4, 3, 4, 3)),
]


@pytest.mark.parametrize("key,kw,shape", CONVS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONVS)])
def test_conv_modules_match_torch(key: str, kw: dict, shape: tuple, tmp_path: Path) -> None:
    torch.manual_seed(0)
    mod = getattr(nn, key[3:])(**kw)
    x = torch.randn(shape)
    # fp32 dots in the interpreter are exact; on the GPU the default precision is tf32x3.
    _close(_call_module(key, mod, x, tmp_path), mod(x).detach())


def test_conv_hidden_sizes_and_unbatched(tmp_path: Path) -> None:
    """Sizes are read at run time: one launcher serves another batch, spatial size and an unbatched input."""
    torch.manual_seed(1)
    mod = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    lib, call_args = registry()["nn.Conv2d"](_info("nn.Conv2d", ["x"], [TensorInfo((2, 3, 8, 8), torch.float32)],
                                                   mod))
    ns = _load(lib, tmp_path)
    holder = nn.Module()
    holder.m = mod
    for x in (torch.randn(5, 3, 13, 6), torch.randn(3, 9, 11)):
        _close(eval(f"{lib.launcher}({', '.join(call_args)})", ns, {"self": holder, "x": x}), mod(x).detach())


def test_conv_half_precision(tmp_path: Path) -> None:
    torch.manual_seed(2)
    mod = nn.Conv2d(4, 8, 3, padding=1).to(torch.bfloat16)
    x = torch.randn(2, 4, 6, 6, dtype=torch.bfloat16)
    _close(_call_module("nn.Conv2d", mod, x, tmp_path), mod(x).detach(), tol=2e-2)


@pytest.mark.parametrize("key,args,kwargs,want", [
    ("F.conv2d", ["x", "w", "b"], {"stride": "2", "padding": "'valid'"},
     lambda t: F.conv2d(t["x"], t["w"], t["b"], stride=2)),
    ("F.conv2d", ["x", "w", "None", "1", "(2, 1)", "2"], {},
     lambda t: F.conv2d(t["x"], t["w"], None, 1, (2, 1), 2)),
    ("F.conv_transpose2d", ["x", "wt", "None", "2", "1", "1"], {"dilation": "2"},
     lambda t: F.conv_transpose2d(t["x"], t["wt"], None, 2, 1, 1, dilation=2)),
])
def test_conv_functional_forms(key: str, args: list[str], kwargs: dict[str, str], want, tmp_path: Path) -> None:
    torch.manual_seed(3)
    t = {"x": torch.randn(2, 4, 7, 6), "w": torch.randn(5, 4, 3, 3), "b": torch.randn(5),
         "wt": torch.randn(4, 3, 2, 3)}
    _close(_call_function(key, t, args, kwargs, tmp_path), want(t))


def test_conv_epilogue_and_precision() -> None:
    """The epilogue lines land before the store under a name of their own; the precision is in the dot."""
    from kernelsmith.compiler.templates.conv import conv_kernel

    lib = conv_kernel("ieee", ["acc = tl.maximum(acc, 0.0)"])
    assert lib.name != "conv" and lib.launcher in lib.source and "acc = tl.maximum(acc, 0.0)" in lib.source
    assert '"ieee"' in lib.source and '"tf32x3"' in conv_kernel().source
    with pytest.raises(SeedUnsupported, match="precision"):
        conv_kernel("fp8")


def test_conv_epilogue_runs(tmp_path: Path) -> None:
    from kernelsmith.compiler.templates.conv import conv_kernel

    torch.manual_seed(4)
    x, w, b = torch.randn(2, 3, 6, 5), torch.randn(4, 3, 3, 3), torch.randn(4)
    ns = _load(conv_kernel("ieee", ["acc = tl.maximum(acc, 0.0) * 2.0"]), tmp_path)
    got = eval([k for k in ns if k.startswith("_ks_conv_") and k.count("_") == 3][0], ns)(x, w, b, 1, 1, 1, 1)
    _close(got, torch.relu(F.conv2d(x, w, b, 1, 1)) * 2.0)


# -------------------------------------------------------------------------------------------------- pooling

POOLS = [
    ("nn.MaxPool1d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), (2, 3, 10)),
    ("nn.MaxPool2d", dict(kernel_size=3, stride=2, padding=1, dilation=2), (2, 3, 9, 11)),
    ("nn.MaxPool2d", dict(kernel_size=(2, 3)), (1, 2, 7, 8)),
    ("nn.MaxPool3d", dict(kernel_size=2, stride=2, padding=1, ceil_mode=True), (1, 2, 5, 6, 3)),
    ("nn.AvgPool1d", dict(kernel_size=4, stride=3, padding=2, count_include_pad=False), (2, 3, 11)),
    ("nn.AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True), (2, 3, 8, 9)),
    ("nn.AvgPool2d", dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
     (1, 2, 8, 7)),
    ("nn.AvgPool2d", dict(kernel_size=2, divisor_override=3), (1, 2, 6, 6)),
    ("nn.AvgPool3d", dict(kernel_size=(2, 3, 2), stride=2, padding=1), (1, 2, 5, 7, 4)),
    ("nn.AdaptiveAvgPool1d", dict(output_size=4), (2, 3, 10)),
    ("nn.AdaptiveAvgPool2d", dict(output_size=(3, None)), (2, 3, 7, 5)),
    ("nn.AdaptiveAvgPool2d", dict(output_size=1), (3, 5, 17, 19)),
    ("nn.AdaptiveAvgPool3d", dict(output_size=(2, 3, 1)), (1, 2, 5, 7, 4)),
    ("nn.AdaptiveMaxPool2d", dict(output_size=(4, 3)), (2, 3, 9, 7)),
    ("nn.AdaptiveMaxPool2d", dict(output_size=(1, 1)), (2, 3, 9, 7)),
    ("nn.AdaptiveMaxPool1d", dict(output_size=3), (1, 4, 5)),
]


@pytest.mark.parametrize("key,kw,shape", POOLS, ids=[f"{p[0]}-{i}" for i, p in enumerate(POOLS)])
def test_pool_modules_match_torch(key: str, kw: dict, shape: tuple, tmp_path: Path) -> None:
    torch.manual_seed(5)
    mod = getattr(nn, key[3:])(**kw)
    x = torch.randn(shape)
    _close(_call_module(key, mod, x, tmp_path), mod(x))


def test_pool_max_propagates_nan(tmp_path: Path) -> None:
    x = torch.randn(1, 2, 6, 6)
    x[0, 0, 1, 1] = float("nan")
    for key, mod in (("nn.MaxPool2d", nn.MaxPool2d(2)), ("nn.AdaptiveMaxPool2d", nn.AdaptiveMaxPool2d(1))):
        got, want = _call_module(key, mod, x, tmp_path), mod(x)
        assert torch.equal(got.isnan(), want.isnan())
        _close(got.nan_to_num(), want.nan_to_num())


@pytest.mark.parametrize("key,args,kwargs,want", [
    ("F.max_pool2d", ["x", "3"], {"stride": "1", "padding": "1"}, lambda x: F.max_pool2d(x, 3, 1, 1)),
    ("F.avg_pool2d", ["x", "(2, 3)", "None", "(1, 1)", "True", "False"], {},
     lambda x: F.avg_pool2d(x, (2, 3), None, (1, 1), True, False)),
    ("F.adaptive_avg_pool2d", ["x", "(2, 5)"], {}, lambda x: F.adaptive_avg_pool2d(x, (2, 5))),
    ("F.adaptive_max_pool2d", ["x"], {"output_size": "1"}, lambda x: F.adaptive_max_pool2d(x, 1)),
])
def test_pool_functional_forms(key: str, args: list[str], kwargs: dict[str, str], want, tmp_path: Path) -> None:
    torch.manual_seed(6)
    x = torch.randn(2, 3, 7, 9)
    _close(_call_function(key, {"x": x}, args, kwargs, tmp_path), want(x))


# ---------------------------------------------------------------------------------------------------- norms

def _pair(mod: nn.Module) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(7)
    with torch.no_grad():
        for p in mod.parameters():
            p.normal_()
        for name, b in mod.named_buffers():
            if name == "running_var":
                b.uniform_(0.5, 2.0)
            elif name == "running_mean":
                b.normal_()
    return mod, copy.deepcopy(mod)


def _check_state(ref: nn.Module, mine: nn.Module) -> None:
    for (name, a), (_, b) in zip(ref.named_buffers(), mine.named_buffers()):
        if a is not None:
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("key,kw,shape", [
    ("nn.BatchNorm1d", dict(num_features=6), (5, 6)),
    ("nn.BatchNorm1d", dict(num_features=4, momentum=None), (3, 4, 7)),
    ("nn.BatchNorm2d", dict(num_features=3, momentum=0.3), (4, 3, 5, 7)),
    ("nn.BatchNorm2d", dict(num_features=3, affine=False, track_running_stats=False), (2, 3, 4, 4)),
    ("nn.BatchNorm3d", dict(num_features=2), (2, 2, 3, 4, 5)),
    ("nn.InstanceNorm1d", dict(num_features=3), (2, 3, 9)),
    ("nn.InstanceNorm2d", dict(num_features=3, affine=True, track_running_stats=True, momentum=0.2),
     (2, 3, 5, 6)),
    ("nn.InstanceNorm3d", dict(num_features=2, affine=True), (2, 2, 3, 4, 3)),
    ("nn.GroupNorm", dict(num_groups=2, num_channels=6), (2, 6, 5, 3)),
    ("nn.GroupNorm", dict(num_groups=3, num_channels=3, affine=False, eps=1e-3), (3, 3, 8)),
    # segments of >= 512 contiguous elements: the apply runs one program per block of a segment
    ("nn.BatchNorm1d", dict(num_features=2, momentum=None), (2, 2, 600)),
    ("nn.InstanceNorm2d", dict(num_features=2, affine=True, track_running_stats=True), (2, 2, 24, 24)),
    ("nn.GroupNorm", dict(num_groups=2, num_channels=4), (2, 4, 24, 24)),
])
def test_norms_train_then_eval(key: str, kw: dict, shape: tuple, tmp_path: Path) -> None:
    """Two training steps (the running statistics, num_batches_tracked and a None momentum as torch has
    them), then eval mode on the running statistics."""
    ref, mine = _pair(getattr(nn, key[3:])(**kw))
    for step in range(3):
        if step == 2:
            ref.eval()
            mine.eval()
        x = torch.randn(shape) * 3.0 + 1.5
        _close(_call_module(key, mine, x, tmp_path), ref(x).detach())
        _check_state(ref, mine)


def test_norm_statistics_are_stable_and_split(tmp_path: Path) -> None:
    """A large offset and long rows (a split reduction over several programs): no cancellation."""
    ref, mine = _pair(nn.BatchNorm1d(2))
    x = torch.randn(3, 2, 3000) + 1000.0
    _close(_call_module("nn.BatchNorm1d", mine, x, tmp_path), ref(x).detach(), tol=1e-3)
    _check_state(ref, mine)


@pytest.mark.parametrize("key,args,kwargs,want", [
    ("F.batch_norm", ["x", "rm", "rv", "w", "b", "True", "0.2"], {}, None),
    ("F.batch_norm", ["x", "rm", "rv"], {"training": "False", "eps": "1e-3"}, None),
    ("F.group_norm", ["x", "2", "w", "b"], {}, lambda t: F.group_norm(t["x"], 2, t["w"], t["b"])),
    ("F.instance_norm", ["x"], {"eps": "1e-4"}, lambda t: F.instance_norm(t["x"], eps=1e-4)),
])
def test_norm_functional_forms(key: str, args: list[str], kwargs: dict[str, str], want, tmp_path: Path) -> None:
    torch.manual_seed(8)
    t = {"x": torch.randn(3, 4, 5, 2), "w": torch.randn(4), "b": torch.randn(4),
         "rm": torch.randn(4), "rv": torch.rand(4) + 0.5}
    if want is None:  # batch_norm: torch on copies of the running buffers, compared after
        ref = {k: v.clone() for k, v in t.items()}
        scope = {"torch": torch, **ref}
        want_out = eval(f"torch.nn.functional.batch_norm({', '.join(args + [f'{k}={v}' for k, v in kwargs.items()])})",
                        scope)
        _close(_call_function(key, t, args, kwargs, tmp_path), want_out)
        torch.testing.assert_close(t["rm"], ref["rm"])
        torch.testing.assert_close(t["rv"], ref["rv"])
    else:
        _close(_call_function(key, t, args, kwargs, tmp_path), want(t))


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("key,mod,dtype,why", [
    ("nn.Conv2d", nn.Conv2d(2, 2, 3, padding=1, padding_mode="reflect"), torch.float32, "padding_mode"),
    ("nn.MaxPool2d", nn.MaxPool2d(2, return_indices=True), torch.float32, "return_indices"),
    ("nn.AdaptiveMaxPool2d", nn.AdaptiveMaxPool2d(2, return_indices=True), torch.float32, "return_indices"),
    ("nn.BatchNorm2d", nn.BatchNorm2d(2), torch.float64, "float64"),
])
def test_entries_refuse_clearly(key: str, mod: nn.Module, dtype: torch.dtype, why: str) -> None:
    info = _info(key, ["x"], [TensorInfo((1, 2, 4, 4), dtype)], mod)
    with pytest.raises(SeedUnsupported, match=rf"^task\.py:1: .*{why}"):
        registry()[key](info)


def test_functional_unknown_argument_refused() -> None:
    info = _info("F.max_pool2d", ["x", "2"], [TensorInfo((1, 2, 4, 4), torch.float32), 2],
                 kwargs={"return_indices": "True"}, kwvalues={"return_indices": True})
    with pytest.raises(SeedUnsupported, match="return_indices"):
        registry()["F.max_pool2d"](info)


# ------------------------------------------------------------------------------------ a strict seed, judged

_TASK = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.bn = nn.BatchNorm2d(cout)
        self.pool = nn.MaxPool2d(2)
        self.gn = nn.GroupNorm(2, cout)
        self.convt = nn.ConvTranspose2d(cout, cin, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        x = self.pool(torch.relu(self.bn(self.conv(x))))
        x = self.convt(self.gn(x) * 2.0)
        return F.adaptive_avg_pool2d(F.avg_pool2d(x, 2), 1).flatten(1)


def get_inputs():
    return [torch.randn(2, 3, 10, 12)]


def get_init_inputs():
    return [3, 8]
'''


def test_strict_seed_with_library_kernels_is_correct(tmp_path: Path) -> None:
    """Conv, batch norm, pooling, group norm and a transposed conv in one task: a strict seed (no torch
    compute outside Triton), judged correct by the referee under the strict policy."""
    from kernelsmith.referee.evaluation import EvalOptions, evaluate

    task = tmp_path / "task_conv_block.py"
    task.write_text(_TASK)
    result = generate_seed(_TASK, filename=str(task), policy="strict")
    libs = [k.split(":")[0] for k in result.kernels if "library kernel" in k]
    assert libs == ["_ks_conv", "_ks_batch_norm", "_ks_max_pool", "_ks_group_norm", "_ks_conv", "_ks_avg_pool",
                    "_ks_adaptive_pool"], result.kernels
    cand = tmp_path / "seed.py"
    cand.write_text(result.source)
    v = evaluate(task, cand, EvalOptions(device="cpu", timeout_s=240, policy="strict"))
    assert v.status.value == "correct", f"{v.status.value}: {v.error}\n{v.log[-3000:]}"
    assert v.kernels


# ------------------------------------------------------------------------ layer norm: split when rows are few

_LN_TASK = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

rows = {rows}
shape = {shape}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(shape)
        with torch.no_grad():  # not the ones/zeros of a fresh module: the affine must be applied per element
            self.ln.weight.normal_()
            self.ln.bias.normal_()

    def forward(self, x):
        return F.layer_norm(self.ln(x) * 2.0, shape[-1:], eps=1e-3)


def get_inputs():
    return [torch.randn(rows, *shape) * 3 + 1]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("rows, shape, library, programs", [
    (3, (8, 32, 40), True, None),  # 3 rows of 10,240: one program a row would idle a GPU -> the split reduction
    (3, (8, 32, 40), True, 12),    # the target program count tuned down: the apply takes 2 rows a program (the
    #                                affine read once for both), its last program one row and a masked turn
    (64, (48,), False, None),      # many short rows: the fused reduction template keeps it (and fuses the * 2)
])
def test_layer_norm_split_only_when_rows_are_few(rows: int, shape: tuple, library: bool, programs: int | None,
                                                 tmp_path: Path) -> None:
    """nn.LayerNorm over few long rows becomes the norm library's split reduction (KernelBench's LayerNorm:
    16 rows of 4M elements); over many rows the entry declines and the fused template keeps it, under both
    policies; either way the referee finds the seed correct (affine per element, hidden shapes)."""
    from kernelsmith.referee.evaluation import EvalOptions, evaluate

    source = _LN_TASK.format(rows=rows, shape=shape)
    task = tmp_path / "task_layer_norm.py"
    task.write_text(source)
    for policy in ("strict", "lenient"):
        result = generate_seed(source, filename=str(task), policy=policy)
        assert ("library:norm" in result.patterns) is library, result.patterns
        assert not result.externs
    cand = tmp_path / "seed.py"
    seed = result.source
    if programs is not None:  # the knob the tuner moves
        assert "_ks_norm_programs = 1056" in seed
        seed = seed.replace("_ks_norm_programs = 1056", f"_ks_norm_programs = {programs}")
    cand.write_text(seed)
    v = evaluate(task, cand, EvalOptions(device="cpu", timeout_s=240, policy="strict"))
    assert v.status.value == "correct", f"{v.status.value}: {v.error}\n{v.log[-3000:]}"


def _seed_judged(source: str, tmp_path: Path, name: str) -> object:
    """The strict seed of `source`, after the referee (CPU, Triton's interpreter) found it correct."""
    from kernelsmith.referee.evaluation import EvalOptions, evaluate

    task = tmp_path / f"task_{name}.py"
    task.write_text(source)
    result = generate_seed(source, filename=str(task), policy="strict")
    cand = tmp_path / f"seed_{name}.py"
    cand.write_text(result.source)
    v = evaluate(task, cand, EvalOptions(device="cpu", timeout_s=240, policy="strict"))
    assert v.status.value == "correct", f"{v.status.value}: {v.error}\n{v.log[-3000:]}"
    return result


_SPLIT_TASK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, a, b):
        {forward}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("forward, inputs, split", [
    # a hinge loss (KernelBench 100): the mean of everything, broadcast operand in the prologue
    ("return torch.mean(torch.clamp(1 - a * b, min=0))", "torch.randn(48, 700), torch.randn(700)", True),
    # 3 rows of 20,000 and an epilogue that reads a reduced-size operand
    ("return torch.sum(a, dim=1) * 2.0 + b", "torch.randn(3, 20000), torch.randn(3)", True),
    # a min over dim 0 of 30,000 x 2, kept dims, then a constant
    ("return torch.amin(a * b, dim=0, keepdim=True) - 1.0", "torch.randn(30000, 2), torch.randn(2)", True),
    # many short rows: one program per row already fills the device (decided at run time, from the shapes)
    ("return torch.sum(a, dim=1) + b", "torch.randn(256, 40), torch.randn(256)", False),
    # two reduction levels of everything (a variance): the mean ends its kernel (a full-size op after a reduction
    # of everything starts the next), so each level is a reduction to one value of its own, split
    ("return torch.var(a) + b", "torch.randn(80, 300), torch.randn(1)", True),
    # two reduction levels over rows (a row variance): one kernel, which writes nothing split
    ("return torch.var(a, dim=1) + b", "torch.randn(3, 300), torch.randn(3)", None),
])
def test_few_long_rows_split_the_reduction(forward: str, inputs: str, split: bool | None, tmp_path: Path) -> None:
    """A reduction with fewer row programs than SMs splits R over programs (partials, then a combining launch
    with the epilogue: two launches per call where the unsplit program makes one); the referee finds the seed
    correct on fresh and hidden inputs, and the tuner's knobs leave the phase and the split alone (changing
    them would change the answer, not the speed)."""
    from kernelsmith.referee.evaluation import EvalOptions, evaluate
    from kernelsmith.workshop.offline.mutate import knobs

    source = _SPLIT_TASK.format(forward=forward, inputs=inputs)
    task = tmp_path / "task_split.py"
    task.write_text(source)
    result = generate_seed(source, filename=str(task), policy="strict")
    assert result.patterns[0] == "reduction"
    assert ("phase=1" in result.source) is (split is not None)
    opts = EvalOptions(device="cpu", timeout_s=240, policy="strict")
    launches = []
    for k, text in enumerate((result.source, result.source.replace("< _ks_sms(", "< 0 * _ks_sms("))):
        cand = tmp_path / f"seed{k}.py"
        cand.write_text(text)
        v = evaluate(task, cand, opts)
        assert v.status.value == "correct", f"{v.status.value}: {v.error}\n{v.log[-3000:]}"
        launches.append(v.kernels["ks_reduction_0_kernel"])
    assert launches[0] == (2 if split else 1) * launches[1], launches  # same calls, split or not
    names = " ".join(k.name for k in knobs(result.source))
    assert "phase" not in names and "parts_p2" not in names and "n_split" not in names, names


_ATTENTION_TASK = '''import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """minGPT's causal attention core (KernelBench level3/44's): the mask rebuilt by comparing a buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16))

    def forward(self, q, k, v):
        T = q.size(-2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        keep = torch.logical_not(att < 0.05)
        return torch.where(keep, att, att * 0.5) @ v, att > 0.2


def get_inputs():
    return [torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8), torch.randn(2, 3, 10, 8)]


def get_init_inputs():
    return []
'''


def test_comparisons_masks_and_math_on_sizes_are_kernels(tmp_path: Path) -> None:
    """`==`/`<`/`>` give masks (1.0/0.0 in a kernel, stored as bool), `masked_fill` and `torch.where` select
    with them, `math.sqrt` of a traced size is Python in forward: minGPT's attention is all Triton under strict,
    and the referee finds it correct, including the boolean output."""
    result = _seed_judged(_ATTENTION_TASK, tmp_path, "attention")
    assert "reduction" in result.patterns and result.patterns.count("matmul_epilogue") == 2
    assert "math.sqrt(" in result.source and not result.externs


_LOSS_TASK = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, a, b, c):
        {forward}


def get_inputs():
    return [torch.randn(6, 40), torch.randn(6, 40), torch.randn(6, 40)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("init, forward", [
    ("pass", "return F.smooth_l1_loss(a, b, beta=0.5)"),
    ("self.loss = nn.HuberLoss(delta=0.7, reduction='sum')", "return self.loss(a, b)"),
    ("pass", "return F.kl_div(torch.log(torch.softmax(a, dim=1)), torch.softmax(b, dim=1), reduction='batchmean')"),
    ("self.loss = nn.TripletMarginLoss(margin=0.5)", "return self.loss(a, b, c)"),
    ("self.loss = nn.MSELoss()", "return self.loss(a, b) + F.l1_loss(a, c, reduction='none').mean()"),
])
def test_losses_are_pointwise_terms_and_a_reduction(init: str, forward: str, tmp_path: Path) -> None:
    """KernelBench's losses (smooth L1/Huber, KL divergence with `batchmean`, triplet margin, MSE/L1) lower to
    pointwise terms and reductions under strict, and the referee finds them correct."""
    result = _seed_judged(_LOSS_TASK.format(init=init, forward=forward), tmp_path, "loss")
    assert "reduction" in result.patterns and not result.externs


@pytest.mark.parametrize("forward, inputs", [
    ("return torch.argmax(a, dim=1)", "torch.randn(5, 300), torch.randn(1)"),              # one tile a row
    ("return torch.argmin(a * b, dim=0, keepdim=True)", "torch.randn(300, 7), torch.randn(7)"),
    ("return torch.argmax(a, dim=1)", "torch.randn(3, 20000), torch.randn(1)"),             # looped over R
    ("return torch.argmax(torch.floor(a), dim=1)", "torch.randn(4, 20000), torch.randn(1)"),  # ties: the first
])
def test_argmax_and_argmin_are_reductions(forward: str, inputs: str, tmp_path: Path) -> None:
    """argmax/argmin over one dim: the extremum's first position (torch's answer on ties), in one tile or as a
    running (best, index) pair over R's tiles; int64 out; the referee finds them correct."""
    result = _seed_judged(_SPLIT_TASK.format(forward=forward, inputs=inputs), tmp_path, "arg")
    assert result.patterns == ["reduction"]


def test_argmax_of_everything_is_refused_by_name() -> None:
    source = _SPLIT_TASK.format(forward="return torch.argmax(a)", inputs="torch.randn(4, 5), torch.randn(1)")
    with pytest.raises(SeedUnsupported, match=r"^task\.py:\d+: .*argmax over the flattened tensor"):
        generate_seed(source, filename="task.py", policy="strict")


def test_row_norms_are_reductions_and_a_whole_tensor_norm_is_split(tmp_path: Path) -> None:
    """`x / x.norm(p=2, dim=1, keepdim=True)` (KernelBench 39) is a reduction with its epilogue; p=1 and inf too.
    A norm of the whole tensor (KernelBench 37, `x / torch.norm(x, p='fro')`) is a reduction to one value (split
    over programs) and the division its own kernel: a reduction of everything never takes a full-size epilogue,
    which would put the whole tensor in one program."""
    forward = ("return a / torch.norm(a, p=2, dim=1, keepdim=True) + a.norm(p=1, dim=1, keepdim=True) "
               "* torch.norm(a, p=float('inf'), dim=1, keepdim=True)")
    result = _seed_judged(_SPLIT_TASK.format(forward=forward, inputs="torch.randn(6, 50), torch.randn(1)"),
                          tmp_path, "norm")
    assert set(result.patterns) == {"reduction"} and not result.externs
    for whole in ("return a / torch.norm(a, p='fro')", "return a - a.mean(dim=(0, 1), keepdim=True) * b"):
        result = _seed_judged(_SPLIT_TASK.format(forward=whole, inputs="torch.randn(6, 5000), torch.randn(1)"),
                              tmp_path, "whole")
        assert result.patterns == ["reduction", "elementwise"] and not result.externs, result.patterns


# ------------------------------------------------------------------------------------------------------- scans

@pytest.mark.parametrize("key, shape, dim, dtype", [
    ("torch.cumsum", (3, 2500), 1, None),          # rows longer than a tile: the carry between tiles
    ("torch.cumsum", (5, 4, 6), 1, None),          # a middle dim: the column kernel
    ("Tensor.cumsum", (7, 3), 0, None),            # the outermost dim
    ("torch.cumprod", (4, 1500), -1, None),
    ("Tensor.cumprod", (6, 5, 3), 0, None),
    ("torch.cumsum", (2, 300), 1, "torch.float16"),  # dtype= casts the result
    ("torch.cumsum", (0, 5), 1, None),             # empty
])
def test_scans_match_torch(key: str, shape: tuple, dim: int, dtype: str | None, tmp_path: Path) -> None:
    """cumsum/cumprod through the scan entry: a row kernel when the dim is innermost, a column kernel otherwise,
    fp32 accumulation, the result in the input's dtype or `dtype=`."""
    x = torch.rand(shape) + 0.5  # products of values near 1 stay finite over a long row
    name = key.split(".")[1]
    kwargs = {"dtype": dtype} if dtype else {}
    got = _call_function(key, {"x": x}, ["x", str(dim)], kwargs, tmp_path)
    want = getattr(torch, name)(x, dim, dtype=eval(dtype) if dtype else None)
    _close(got, want, tol=1e-3 if dtype else 1e-4)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_scans_refuse_integers_and_float64_clearly(dtype: torch.dtype) -> None:
    info = _info("torch.cumsum", ["x", "1"], [TensorInfo((3, 4), dtype), 1])
    with pytest.raises(SeedUnsupported, match=rf"task\.py:1: torch\.cumsum: cumsum of {dtype}.*float32 only"):
        registry()["torch.cumsum"](info)


@pytest.mark.parametrize("forward, inputs", [
    # KernelBench 91 (reverse): flips around the scan; 92 (exclusive): a zeros_like column, narrow and cat
    ("return torch.cumsum(a.flip(1), dim=1).flip(1) + b",
     "torch.randn(3, 1100), torch.randn(1100)"),
    ("s = torch.cumsum(a.narrow(dim=1, start=0, length=a.size(1) - 1), dim=1)\n        "
     "return torch.cat((torch.zeros_like(a.select(1, 0).unsqueeze(1)), s), dim=1) * b",
     "torch.randn(4, 33), torch.randn(33)"),
    # KernelBench 93 (masked): the mask's product is an elementwise kernel before the scan
    ("return torch.cumprod(torch.sigmoid(a) * (b > 0), dim=0)", "torch.randn(9, 5), torch.randn(5)"),
])
def test_scan_seeds_are_correct_under_strict(forward: str, inputs: str, tmp_path: Path) -> None:
    result = _seed_judged(_SPLIT_TASK.format(forward=forward, inputs=inputs), tmp_path, "scan")
    assert "library:scan" in result.patterns and not result.externs


def test_zeros_like_is_a_fill_that_ignores_nan(tmp_path: Path) -> None:
    """`torch.zeros_like(x)`/`ones_like`/`full_like` are fills in the elementwise kernel: a NaN in x stays out."""
    forward = "return torch.zeros_like(a) + torch.ones_like(a) * 2.0 + torch.full_like(b, 0.5) + a * 0.0"
    source = _SPLIT_TASK.format(forward=forward, inputs="torch.randn(4, 6), torch.randn(6)")
    result = generate_seed(source, filename="task.py", policy="strict")
    assert set(result.patterns) == {"elementwise"} and not result.externs
    task = tmp_path / "t.py"
    task.write_text(result.source)
    spec = importlib.util.spec_from_file_location("ks_fill_seed", task)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    a = torch.randn(4, 6)
    a[1, 2] = float("nan")
    got = mod.ModelNew()(a, torch.randn(6))
    assert torch.isnan(got[1, 2]) and not torch.isnan(got[0]).any()  # only `a * 0.0` carries the NaN
    assert torch.allclose(got[0], torch.full((6,), 2.5))


# ------------------------------------------------------------------------------- triangles and cross-entropy

@pytest.mark.parametrize("key, shape, diagonal, dtype", [
    ("torch.triu", (7, 9), 0, torch.float32),
    ("Tensor.triu", (2, 5, 4), -1, torch.float32),     # batched, below the main diagonal
    ("torch.tril", (6, 6), 2, torch.float16),
    ("Tensor.tril", (3, 4, 8), 0, torch.float32),
])
def test_triangles_match_torch(key: str, shape: tuple, diagonal: int, dtype: torch.dtype, tmp_path: Path) -> None:
    x = torch.randn(shape).to(dtype)
    got = _call_function(key, {"x": x}, ["x", str(diagonal)], {}, tmp_path)
    _close(got, getattr(torch, key.split(".")[1])(x, diagonal))


@pytest.mark.parametrize("kwargs", [{}, {"reduction": "'sum'"}, {"reduction": "'none'"},
                                    {"ignore_index": "3"}, {"ignore_index": "3", "reduction": "'sum'"}])
def test_cross_entropy_matches_torch(kwargs: dict[str, str], tmp_path: Path) -> None:
    """One row kernel (logsumexp over tiles of C minus the target's logit), then the reduction's kernel; rows
    whose target is ignore_index count for nothing."""
    x = torch.randn(37, 2100) * 3.0   # C above one tile: the running max and rescaled sum
    t = torch.randint(0, 2100, (37,))
    t[::5] = 3
    got = _call_function("F.cross_entropy", {"x": x, "t": t}, ["x", "t"], kwargs, tmp_path)
    want = F.cross_entropy(x, t, **{k: eval(v) for k, v in kwargs.items()})
    _close(got, want, tol=1e-4)


def test_cross_entropy_module_reads_its_settings(tmp_path: Path) -> None:
    mod = nn.CrossEntropyLoss(reduction="sum", ignore_index=1)
    x, t = torch.randn(6, 10), torch.tensor([1, 2, 3, 1, 0, 9])
    info = _info("nn.CrossEntropyLoss", ["x", "t"], [_tinfo(x), _tinfo(t)], mod)
    lib, call_args = registry()["nn.CrossEntropyLoss"](info)
    holder = nn.Module()
    holder.m = mod
    got = eval(f"{lib.launcher}({', '.join(call_args)})", _load(lib, tmp_path), {"self": holder, "x": x, "t": t})
    _close(got, mod(x, t))


@pytest.mark.parametrize("kwargs, kwvalues, why", [
    ({"weight": "w"}, {"weight": TensorInfo((5,), torch.float32)}, "class weights"),
    ({"label_smoothing": "0.1"}, {"label_smoothing": 0.1}, "label smoothing"),
])
def test_cross_entropy_refuses_what_it_does_not_compute(kwargs: dict, kwvalues: dict, why: str) -> None:
    info = _info("F.cross_entropy", ["x", "t"], [TensorInfo((4, 5), torch.float32), TensorInfo((4,), torch.int64)],
                 kwargs=kwargs, kwvalues=kwvalues)
    with pytest.raises(SeedUnsupported, match=rf"task\.py:1: F\.cross_entropy: .*{why}"):
        registry()["F.cross_entropy"](info)
    probs = _info("F.cross_entropy", ["x", "p"], [TensorInfo((4, 5), torch.float32), TensorInfo((4, 5), torch.float32)])
    with pytest.raises(SeedUnsupported, match="probability targets"):
        registry()["F.cross_entropy"](probs)


def test_cross_entropy_and_triangle_seeds_are_correct_under_strict(tmp_path: Path) -> None:
    forward = "return F.cross_entropy(torch.tril(a @ a.t(), diagonal=-1) * 0.1, b) * 2.0"
    source = _SPLIT_TASK.format(forward=forward, inputs="torch.randn(12, 40), torch.randint(0, 12, (12,))")
    result = _seed_judged(source, tmp_path, "xent")
    assert {"library:tri", "library:xent"} <= set(result.patterns) and not result.externs


@pytest.mark.parametrize("precision", ["ieee", "tf32", None])
def test_a_library_convolution_computes_at_the_seeds_precision(precision: str | None) -> None:
    """The seed's precision setting reaches library kernels with dots (it used to stop at the fused templates: a
    seed headed `ieee` ran its convolution at tf32x3)."""
    import re

    source = _SPLIT_TASK.format(forward="return torch.relu(self.conv(a)) + b", inputs="torch.randn(1, 3, 8, 8), "
                                "torch.randn(1)").replace("    def forward", "    def __init__(self):\n        "
                                                          "super().__init__()\n        self.conv = nn.Conv2d(3, 4, 3)"
                                                          "\n\n    def forward")
    result = generate_seed(source, filename="task.py", policy="strict", precision=precision)
    assert set(re.findall(r'_ks_conv\w*_precision = "(\w+)"', result.source)) == {precision or "tf32x3"}
    assert f"# kernelsmith-precision: {precision or 'tf32x3'}" in result.source


# ------------------------------------------------------------------------------------------------- attention

@pytest.mark.parametrize("shapes, kwargs, dtype", [
    (((2, 3, 20, 24), (2, 3, 20, 24), (2, 3, 20, 24)), {}, torch.float32),
    (((2, 3, 20, 24), (2, 3, 20, 24), (2, 3, 20, 24)), {"is_causal": "True"}, torch.float32),
    (((3, 70, 16), (3, 45, 16), (3, 45, 200)), {"scale": "0.3"}, torch.float32),  # S != L, two Ev tiles, 3-D
    (((1, 2, 130, 80), (1, 2, 130, 80), (1, 2, 130, 80)), {"is_causal": "True"}, torch.float32),  # E in chunks
    (((2, 2, 17, 32), (2, 2, 17, 32), (2, 2, 17, 32)), {}, torch.float16),
])
def test_attention_matches_torch(shapes: tuple, kwargs: dict[str, str], dtype: torch.dtype, tmp_path: Path) -> None:
    """Flash-style: key tiles with an online softmax, E in chunks, output features split over programs; the
    seed's precision is ieee here so fp32 matches torch's to rounding."""
    q, k, v = (torch.randn(s).to(dtype) for s in shapes)
    scope = {"torch": torch, "q": q, "k": k, "v": v}
    info = _info("F.scaled_dot_product_attention", ["q", "k", "v"], [_tinfo(q), _tinfo(k), _tinfo(v)],
                 kwargs=kwargs, kwvalues={n: eval(e) for n, e in kwargs.items()})
    info = NodeInfo(**{**info.__dict__, "precision": "ieee"})
    lib, call_args = registry()["F.scaled_dot_product_attention"](info)
    got = eval(f"{lib.launcher}({', '.join(call_args)})", _load(lib, tmp_path), scope)
    want = F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                          **{n: eval(e) for n, e in kwargs.items()}).to(dtype)
    _close(got, want, tol=2e-3 if dtype == torch.float16 else 1e-4)


@pytest.mark.parametrize("kwargs, kwvalues, why", [
    ({"attn_mask": "m"}, {"attn_mask": TensorInfo((4, 4), torch.bool)}, "mask tensor"),
    ({"dropout_p": "0.1"}, {"dropout_p": 0.1}, "dropout is random"),
    ({"enable_gqa": "True"}, {"enable_gqa": True}, "grouped-query"),
])
def test_attention_refuses_what_it_does_not_compute(kwargs: dict, kwvalues: dict, why: str) -> None:
    t = TensorInfo((1, 2, 4, 8), torch.float32)
    info = _info("F.scaled_dot_product_attention", ["q", "k", "v"], [t, t, t], kwargs=kwargs, kwvalues=kwvalues)
    with pytest.raises(SeedUnsupported, match=rf"task\.py:1: F\.scaled_dot_product_attention: .*{why}"):
        registry()["F.scaled_dot_product_attention"](info)


def test_attention_seed_is_correct_under_strict_and_torch_first_under_lenient(tmp_path: Path) -> None:
    from kernelsmith.compiler import generate_seeds

    forward = "return F.scaled_dot_product_attention(a, b, b * 0.5, is_causal=True) + 1.0"
    source = _SPLIT_TASK.format(forward=forward, inputs="torch.randn(2, 2, 24, 16), torch.randn(2, 2, 24, 16)")
    result = _seed_judged(source, tmp_path, "attn")
    assert "library:attn" in result.patterns and not result.externs
    first, second = generate_seeds(source, filename="task.py", policy="lenient")
    assert any("scaled_dot_product_attention" in e for e in first.externs) and "library:attn" in second.patterns


@pytest.mark.parametrize("forward, inputs", [
    ('return torch.einsum("bijl,lk->bijk", a, b)', "torch.randn(2, 3, 4, 6), torch.randn(6, 5)"),  # KernelBench 11
    ('return torch.einsum("il,kl->ik", a, b) + 1.0', "torch.randn(7, 6), torch.randn(5, 6)"),  # weight read transposed
    ('return torch.einsum("bij,bjk->bik", [a, b])', "torch.randn(3, 4, 6), torch.randn(3, 6, 5)"),  # batched, a list
])
def test_einsums_that_are_one_matmul_are_matmuls(forward: str, inputs: str, tmp_path: Path) -> None:
    result = _seed_judged(_SPLIT_TASK.format(forward=forward, inputs=inputs), tmp_path, "einsum")
    assert result.patterns == ["matmul_epilogue"] and not result.externs


def test_other_einsums_are_refused_by_form_and_stay_torch_calls_under_lenient() -> None:
    source = _SPLIT_TASK.format(forward='return torch.einsum("ij,ij->i", a, b)', inputs="torch.randn(4, 5), "
                                "torch.randn(4, 5)")
    with pytest.raises(SeedUnsupported, match=r"task\.py:\d+: .*einsum 'ij,ij->i': only the forms that are one"):
        generate_seed(source, filename="task.py", policy="strict")
    assert any("einsum" in e for e in generate_seed(source, filename="task.py", policy="lenient").externs)
