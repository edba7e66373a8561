"""The compiler's shared vocabulary: its errors and result, the IR value `_Val` every pass hands on, and how fx
targets are named (namespaces, aliases, the glue ops left to torch) and located (the task file's line)."""

from __future__ import annotations

import itertools
import traceback
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
DOT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_counter = itertools.count()
POLICIES = ("strict", "lenient")
PRECISIONS = ("ieee", "tf32x3", "tf32")
DEFAULT_PRECISION = "tf32x3"   # fp32 matmuls: three TF32 products, close to fp32 (the tolerance is 1e-2 anyway)


class SeedUnsupported(Exception):
    """The reference uses an operator (or a form of one) that no template covers; the message names it."""


@dataclass
class SeedResult:
    source: str                                          # the complete candidate program
    patterns: list[str]                                  # the template of each kernel, in launch order
    kernels: list[str] = field(default_factory=list)     # per kernel: "name: template (fused ops)"
    externs: list[str] = field(default_factory=list)     # lenient: the operators left to torch, as described
    precision: str = DEFAULT_PRECISION                   # the fp32 matmuls' tl.dot input precision
    policy: str = "strict"
    families: list[str] = field(default_factory=list)    # library families the model has operators of
    vendor: list[str] = field(default_factory=list)      # lenient: those of them left to torch (cuDNN, ...)
    copy_only: bool = False                              # lenient: no Triton kernel but the final copy


# ----------------------------------------------------------------------------------------------------- the IR


@dataclass(eq=False)
class _Val:
    """One IR value. Tensors have a shape; glue values that are not tensors carry their trace-time `value`."""

    id: int
    kind: str                      # input | param | glue | ew | red | mm
    op: str
    args: tuple = ()
    params: dict = field(default_factory=dict)
    shape: tuple | None = None
    dtype: Any = None
    value: Any = None
    origin: str = ""               # the fx node it came from (for comments and messages)
    render: Any = None             # glue: callable(name_of) -> Python expression

    @property
    def tensor(self) -> bool:
        return self.shape is not None


@dataclass(frozen=True)
class _AttrRef:
    """A float in the traced graph that is the value of a model attribute (found by `_attribute_refs`)."""

    path: str
    value: float


@dataclass
class _Pair:
    """`torch.max(x, dim)`: (values, indices); only the values are supported."""

    values: _Val
    origin: str
    node: Any = None               # the fx node (under lenient its indices come from the torch call itself)


def _flat(obj: Any) -> list[_Val]:
    out: list[_Val] = []
    if isinstance(obj, _Val):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            out += _flat(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            out += _flat(o)
    elif isinstance(obj, slice):
        out += _flat([obj.start, obj.stop, obj.step])
    return out


def _broadcast(shapes: list[tuple]) -> tuple:
    nd = max(len(s) for s in shapes)
    out = [1] * nd
    for s in shapes:
        for j, d in enumerate(s, nd - len(s)):
            if d != 1:
                if out[j] not in (1, d):
                    raise SeedUnsupported(f"shapes {shapes} do not broadcast")
                out[j] = d
    return tuple(out)


# ---------------------------------------------------------------------------------------- naming fx targets

_NAMESPACES = {
    "torch": "torch", "torch.functional": "torch", "torch.nn.functional": "torch.nn.functional",
    "torch._C._nn": "torch.nn.functional", "_operator": "operator", "operator": "operator",
    "builtins": "builtins", "torch.special": "torch.special", "torch._C._special": "torch.special",
    "torch._C._VariableFunctions": "torch", "math": "math", "einops.einops": "einops",
}
# Python's math functions on traced sizes (`1.0 / math.sqrt(k.size(-1))`): glue, computed in forward.
_MATH = frozenset("sqrt exp log log2 log10 pow floor ceil sin cos tan tanh erf fabs isqrt".split())
_ALIASES = {
    "truediv": "div", "true_divide": "div", "divide": "div", "multiply": "mul", "subtract": "sub",
    "negative": "neg", "absolute": "abs", "clip": "clamp", "concat": "cat", "concatenate": "cat",
    "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim", "expit": "sigmoid",
    "mm": "matmul", "bmm": "matmul", "log_sigmoid": "logsigmoid", "special_expit": "sigmoid", "arctan": "atan",
    "clip_": "clamp_", "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le", "not_equal": "ne",
}
_GLUE_METHODS = frozenset(
    "view reshape flatten unflatten permute transpose t unsqueeze squeeze expand expand_as view_as reshape_as "
    "size dim numel chunk split narrow select movedim unbind".split()
)
_GLUE_FUNCTIONS = frozenset(
    "flatten reshape transpose permute squeeze unsqueeze t cat stack chunk split narrow movedim select "
    "unbind".split()
)
_PY_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "pow": "**",
           "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_IDENTITY = frozenset({"contiguous", "clone", "detach"})
_SKIP = frozenset({"_assert", "_assert_is_none"})


def _qualname(fn: Any) -> tuple[str, str]:
    """(namespace, name) of a call_function target, e.g. ("torch.nn.functional", "gelu")."""
    name = getattr(fn, "__name__", repr(fn))
    ns = _NAMESPACES.get(getattr(fn, "__module__", None) or "", getattr(fn, "__module__", None) or "?")
    return ns, name


def _describe(node: fx.Node, gm: fx.GraphModule) -> str:
    """How the unsupported-operator message names a node: "aten.conv2d (call_function torch.conv2d)"."""
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        return f"nn.{type(mod).__name__} (call_module {node.target})"
    if node.op == "call_method":
        return f"aten.{node.target} (call_method Tensor.{node.target})"
    ns, name = _qualname(node.target)
    return f"aten.{name} (call_function {ns}.{name})"


def _canon(name: str) -> str:
    return _ALIASES.get(name, name)


def _node_line(node: fx.Node | None, filename: str) -> int | None:
    """The task file's line that made `node` (recorded by `_LineTracer`)."""
    return node.meta.get("task_line") if node is not None else None


def _exc_line(exc: BaseException, filename: str) -> int | None:
    """The task file's line where `exc` was raised (its innermost frame in that file)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    return lines[-1] if lines else None


def _at(filename: str, line: int | None) -> str:
    return f"{filename}:{line}: " if line else f"{filename}: "


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().split("\n", 1)[0]
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
