"""Library kernels: pre-written Triton kernel families for operators the fuser cannot express as elementwise /
reduction / matmul groups (convolution, pooling, batch/group/instance norm, gathers, ...).

The lowering asks this registry about every call node before it tries anything else. When an entry exists for
the node's key and accepts the node, the node becomes a *library node* in strict and lenient alike: a fusion
barrier (like an extern torch call) whose code in the generated `forward` is one call of the entry's launcher,
and whose kernel source is pasted into the program once per `LibraryKernel.name`. Under `lenient`, the torch
call itself (an extern) is used only when no entry exists or the entry refuses.

Registering an entry
--------------------
A module `kernelsmith/compiler/templates/<family>.py` (today: `conv`, `pool`, `norm`, `scan`, `index`, `attention`, and `demo` here) defines

    ENTRIES: dict[str, Callable[[NodeInfo], tuple[LibraryKernel, list[str]]]]

mapping op keys to entry functions. `registry()` imports those modules (those that exist) on first use and
merges their ENTRIES; a key defined twice keeps the first module's (order: `_FAMILIES`). An entry returns the
kernel family and the launcher's call arguments as Python expressions (built from `NodeInfo.args`,
`.kwargs`, `.module_expr`, `.params`), or refuses with `raise info.refuse("why")` (a `SeedUnsupported`), or
declines with `raise info.decline("why")` (`Declined`): the node is left to the fusing templates under either
policy — for an op the templates cover too, where the library kernel only pays at some shapes (LayerNorm over
few long rows: a split reduction; over many rows the fused reduction template, which also fuses neighbours).

Op keys
-------
- `call_module` of a `torch.nn` module: `"nn.<ClassName>"` — "nn.Conv2d", "nn.ConvTranspose3d", "nn.MaxPool2d",
  "nn.AdaptiveAvgPool2d", "nn.BatchNorm2d", "nn.GroupNorm", "nn.InstanceNorm2d".
- `call_function` of a function that `torch.nn.functional` exposes under its name: `"F.<name>"` — "F.conv2d",
  "F.max_pool2d", "F.batch_norm". `torch.conv2d` *is* `F.conv2d` (one builtin), so both spellings are "F.conv2d".
- any other `call_function` of `torch` (incl. `torch._C._VariableFunctions`, `torch.functional`):
  `"torch.<name>"` — "torch.flip", "torch.cumsum", "torch.relu" (not `F.relu`, a different function).
- `call_method` on a tensor: `"Tensor.<name>"` — "Tensor.flip".
Names are the function's `__name__` as called (an in-place form keeps its trailing underscore).

The launcher
------------
`LibraryKernel.source` is module-level code: `@triton.jit` kernel(s) and a Python function named
`LibraryKernel.launcher`, all names prefixed `_ks_<name>`. The generated program already imports `torch`,
`torch.nn as nn`, `triton`, `triton.language as tl` and has the helpers of
`kernelsmith.compiler.templates.common.PY_HELPERS` (`_ks_attr`, `_ks_prod`, `_ks_np2`, ...). The launcher is
called as `launcher(*call_args)` from `forward`, returns the output tensor (one tensor, of `info.out`'s dtype),
must read every size from its arguments at run time (hidden inputs have other sizes than the traced ones) and
should launch at least one Triton kernel. Hyper-parameters that could change after construction are best read
at run time from the module (`f"{info.module_expr}.stride"`), constants from `info.hyper` may be baked.

Example (the demo entry below): `Tensor.flip(x, dims)` →
`(LibraryKernel("flip", SOURCE, "_ks_flip"), [info.args[0], repr(dims)])` → `y = _ks_flip(x, [1])` in forward.

Epilogue hook (reserved): an entry may set `LibraryKernel.epilogue = True`; the lowering does not fuse into
library nodes yet, so today it has no effect.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

from kernelsmith.compiler.ir import SeedUnsupported

__all__ = ["ENTRIES", "Declined", "LibraryKernel", "NodeInfo", "SeedUnsupported", "TensorInfo", "registry"]

# The template modules whose ENTRIES are merged, in precedence order.
_FAMILIES = ("conv", "pool", "norm", "scan", "index", "attention")


class Declined(Exception):
    """An entry leaves the node to the fusing templates (not a refusal: the templates cover it)."""


@dataclass(frozen=True)
class LibraryKernel:
    """A pre-written Triton kernel family for one operator kind (an op the fuser cannot express as ew/red/mm)."""

    name: str                 # e.g. "conv": the source is pasted once per name
    source: str               # module-level code: @triton.jit kernel(s) + the Python launcher; names `_ks_<name>*`
    launcher: str             # the launcher's function name, called from forward
    epilogue: bool = False    # reserved: accepts fused elementwise lines (not used by the lowering yet)


@dataclass(frozen=True)
class TensorInfo:
    """A tensor argument or result at trace time (its sizes are the traced ones: read real sizes at run time)."""

    shape: tuple[int, ...]
    dtype: torch.dtype


@dataclass(frozen=True)
class NodeInfo:
    """What an entry knows about one call node of the traced forward."""

    key: str                          # the op key (see the module docstring): "nn.Conv2d", "F.conv2d", ...
    kind: str                         # the fx node kind: call_module | call_function | call_method
    target: str                       # module path ("features.0"), function name ("conv2d") or method name
    args: tuple[str, ...]             # Python expressions of the positional arguments, valid in forward
    kwargs: dict[str, str]            # the same for keyword arguments
    values: tuple[Any, ...]           # trace-time values of `args`: TensorInfo for tensors, else the constant
    kwvalues: dict[str, Any]          # the same for `kwargs`
    out: Any                          # TensorInfo of the result (or a tuple of them, or a constant)
    module: torch.nn.Module | None = None   # call_module: the instance (often on the meta device: no data)
    module_expr: str | None = None    # call_module: the module in forward, e.g. "_ks_attr(self, 'features.0')"
    hyper: dict[str, Any] = field(default_factory=dict)   # call_module: its non-tensor public attributes
    params: dict[str, str | None] = field(default_factory=dict)  # call_module: direct parameters and buffers as
    #                                   expressions ("weight" -> "_ks_attr(self, 'conv.weight')"), None when unset
    training: bool = False            # call_module: the module's training flag at trace time
    where: str = ""                   # "task.py:12: nn.Conv2d (call_module conv)", for messages
    precision: str | None = None      # the seed's fp32 dot precision (ieee, tf32x3, tf32), for entries with dots

    def refuse(self, why: str) -> SeedUnsupported:
        """The entry's refusal: `raise info.refuse("transposed conv with output_padding")`."""
        return SeedUnsupported(f"{self.where}: {why}" if self.where else why)

    def float_input(self, what: str | None = None) -> TensorInfo:
        """The first argument, refused unless a float16/bfloat16/float32 tensor (the library kernels' types)."""
        x = self.values[0] if self.values else None
        what = what or self.key
        if not isinstance(x, TensorInfo):
            raise self.refuse(f"{what} of a non-tensor")
        if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise self.refuse(f"{what} on {x.dtype} (float16/bfloat16/float32 only)")
        return x

    def decline(self, why: str) -> Declined:
        """The entry's "the templates do better here": `raise info.decline("many short rows")`."""
        return Declined(f"{self.where}: {why}" if self.where else why)


Entry = Callable[[NodeInfo], "tuple[LibraryKernel, list[str]]"]


# ------------------------------------------------------------------------------ the demo entry: Tensor.flip

_FLIP_SOURCE = '''
@triton.jit
def _ks_flip_kernel(x_ptr, y_ptr, n, inner, size, BLOCK: tl.constexpr):
    # y = x reversed along one dim, viewed as (outer, size, inner): a gather with a computed index.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    j = (offs // inner) % size
    src = offs + (size - 1 - 2 * j) * inner
    tl.store(y_ptr + offs, tl.load(x_ptr + src, mask=mask), mask=mask)


def _ks_flip(x, dims):
    """torch.flip(x, dims) as one gather kernel per flipped dim."""
    y = x.contiguous()
    for d in dims:
        d = d % y.dim()
        out = torch.empty_like(y)
        n = y.numel()
        if n > 0:
            block = min(_ks_np2(n), 1024)
            _ks_flip_kernel[(triton.cdiv(n, block),)](y, out, n, _ks_prod(y.shape[d + 1:]), y.shape[d],
                                                       BLOCK=block)
        y = out
    return y
'''


def _flip(info: NodeInfo) -> tuple[LibraryKernel, list[str]]:
    """Demo entry (and test of the library path): `torch.flip(x, dims)` / `x.flip(dims)`."""
    if len(info.values) < 1 or not isinstance(info.values[0], TensorInfo):
        raise info.refuse("flip of a non-tensor")
    dims = info.values[1:] if len(info.values) > 2 else (info.values[1] if len(info.values) > 1
                                                           else info.kwvalues.get("dims"))
    if isinstance(dims, int):
        dims = [dims]
    if not isinstance(dims, (list, tuple)) or not all(type(d) is int for d in dims):
        raise info.refuse("flip dims must be constant ints")
    return LibraryKernel("flip", _FLIP_SOURCE, "_ks_flip"), [info.args[0], repr(list(dims))]


ENTRIES: dict[str, Entry] = {"torch.flip": _flip, "Tensor.flip": _flip}

_registry: dict[str, Entry] | None = None
_families: dict[str, str] = {}  # op key -> the family module that registered it ("conv", "pool", ..., "demo")

_FUNCTION_NAMESPACES = {
    "torch": "torch", "torch.functional": "torch", "torch._C._VariableFunctions": "torch",
    "torch.nn.functional": "F", "torch._C._nn": "F",
}


def op_key(node: fx.Node, gm: fx.GraphModule) -> str | None:
    """The registry key of a call node (the scheme in the module docstring), None for other nodes."""
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        return f"nn.{type(mod).__name__}" if type(mod).__module__.startswith("torch.nn") else None
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_function":
        ns = _FUNCTION_NAMESPACES.get(getattr(node.target, "__module__", None) or "")
        name = getattr(node.target, "__name__", None)
        if not (ns and name):
            return None
        if getattr(torch.nn.functional, name, None) is node.target:
            return f"F.{name}"  # F.conv2d is torch.conv2d: one key for both spellings
        return f"{ns}.{name}"
    return None


def registry() -> dict[str, Entry]:
    """All entries: this module's and those of the template families that exist (imported on first use, so a
    family module can import this one)."""
    global _registry
    if _registry is None:
        merged: dict[str, Entry] = {}
        for fam in _FAMILIES:
            try:
                mod = importlib.import_module(f"kernelsmith.compiler.templates.{fam}")
            except ModuleNotFoundError as exc:
                if exc.name != f"kernelsmith.compiler.templates.{fam}":
                    raise
                continue
            for key, fn in getattr(mod, "ENTRIES", {}).items():
                merged.setdefault(key, fn)
                _families.setdefault(key, fam)
        for key, fn in ENTRIES.items():
            merged.setdefault(key, fn)
            _families.setdefault(key, "demo")
        _registry = merged
    return _registry



def family_of(key: str) -> str | None:
    """The family ("conv", "pool", "norm", "demo") whose entry serves `key`, None when none does."""
    registry()
    return _families.get(key)


def check_kernel(lib: LibraryKernel) -> None:
    """A library kernel's source must define its launcher; a broken entry is a bug said in one line."""
    if not re.search(rf"^def {re.escape(lib.launcher)}\(", lib.source, re.M):
        raise SeedUnsupported(f"library kernel {lib.name!r}: its source defines no launcher {lib.launcher}()")
