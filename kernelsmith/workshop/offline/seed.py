"""Seed: translate a KernelBench reference into a first Triton candidate, with no language model.

`generate_seed(task_source, init_inputs, example_inputs)` executes the task in a fresh module, builds
`Model(*init_inputs)` on the meta device (no memory, no compute), traces it with `torch.fx.symbolic_trace` and
propagates shapes on meta tensors. Every traced node is lowered to a small IR:

- elementwise ops (`ew`): activations, arithmetic with tensors or scalars, casts — nn modules, `F.*`,
  `torch.*` and tensor methods all map to the same ops;
- reductions (`red`): sum / mean / max / min / sum-divided-by-(R - correction) over a contiguous block of
  dims; softmax, log-softmax, logsumexp, var/std, layer norm and RMS norm are lowered to them;
- matmuls (`mm`): nn.Linear / F.linear (weight read transposed in place), matmul / mm / bmm / `@`, addmm;
- glue: views, reshapes, permutes, sizes and Python arithmetic on them — left to torch in `forward` (the strict
  policy allows views, copies and allocation outside kernels).

The IR is fused greedily (each node joins the newest kernel that produced one of its operands when it fits):
an elementwise chain over one domain → one `elementwise` kernel; reductions with their elementwise prologue
and epilogue over one (outer, R, inner) geometry → one `reduction` kernel (so residual add → RMS norm, or the
whole of softmax, is one kernel); a matmul plus the elementwise chain that follows it → one `matmul_epilogue`
kernel. A graph of several such pieces (an MLP, a pre-norm FFN block) becomes several kernels launched in
order. Anything else raises `SeedUnsupported` naming the operator.

The candidate's `ModelNew` is a copy of the reference's `Model` class with `forward` replaced, so it creates
its parameters with the same code in the same order (the referee seeds both constructors alike). Shapes are
read at run time and every kernel is masked, so hidden inputs of other sizes work. Float attributes that
forward reads (`x * self.scale`, found by retracing with sentinel values) and nn modules' hyper-parameters
(eps, slopes, bounds) are read from `self` at run time and passed to the kernels; what Python computes from
them while tracing (`self.scale * 2`), reduction dims and pow exponents are specialised to the traced values.
"""

from __future__ import annotations

import ast
import copy
import inspect
import itertools
import math
import re
import sys
import textwrap
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from kernelsmith import pyast
from kernelsmith.task import Task, TaskMissingModule, check_imports, load_module
from kernelsmith.workshop.offline import templates_triton as T

__all__ = ["SeedResult", "SeedUnsupported", "generate_seed", "seed_for_task"]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
DOT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_counter = itertools.count()


class SeedUnsupported(Exception):
    """The reference uses an operator (or a form of one) that no template covers; the message names it."""


@dataclass
class SeedResult:
    source: str                                          # the complete candidate program
    patterns: list[str]                                  # the template of each kernel, in launch order
    kernels: list[str] = field(default_factory=list)     # per kernel: "name: template (fused ops)"


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
    "torch._C._VariableFunctions": "torch",
}
_ALIASES = {
    "truediv": "div", "true_divide": "div", "divide": "div", "multiply": "mul", "subtract": "sub",
    "negative": "neg", "absolute": "abs", "clip": "clamp", "concat": "cat", "concatenate": "cat",
    "swapaxes": "transpose", "swapdims": "transpose", "moveaxis": "movedim", "expit": "sigmoid",
    "mm": "matmul", "bmm": "matmul", "log_sigmoid": "logsigmoid", "special_expit": "sigmoid", "greater": "gt", "arctan": "atan", "clip_": "clamp_",
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


def _known(node: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether `_Lowerer.call` could lower `node` for some values of its arguments: False means refused
    whatever the shapes, so a model with such an operator is refused before any shape is propagated (an RNN
    run on real CPU tensors to learn shapes took minutes, only to be refused at its `nn.LSTM`)."""
    if node.op == "call_function" and getattr(node.target, "__name__", "") in _SKIP:
        return True  # the guards fx adds for specialised arguments (removed before lowering)
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        return hasattr(_Lowerer, f"mod_{type(mod).__name__}") and type(mod).__module__.startswith("torch.nn")
    if node.op == "call_method":
        name, ns = node.target, "method"
    elif node.op == "call_function":
        ns, name = _qualname(node.target)
        if ns not in ("torch", "torch.nn.functional", "operator", "builtins", "torch.special"):
            return False
    else:
        return True
    if name in _SKIP:
        return True
    if name.endswith("_") and not name.startswith("_") and hasattr(_Lowerer, f"op_{_canon(name[:-1])}"):
        name = name[:-1]
    if ns == "operator" and name.startswith("i") and name[1:] in _PY_OPS:
        name = name[1:]
    name = _canon(name)
    if name in ("getitem", "getattr") or name in _IDENTITY or hasattr(_Lowerer, f"op_{name}"):
        return True
    if ns == "operator":
        return name in _PY_OPS or name == "neg"
    return (ns == "method" and name in _GLUE_METHODS) or (ns == "torch" and name in _GLUE_FUNCTIONS)


# What torch.fx's failures mean for a KernelBench forward, in words.
_TRACE_WHY = (
    ("cannot be used as inputs to control flow", "Model.forward branches on a tensor's value (if/while on data)"),
    ("cannot be interpreted as an integer", "Model.forward uses a tensor's size or value as a Python int "
                                           "(range(), a loop count)"),
    ("slice indices must be integers", "Model.forward slices with a tensor's size or value as a Python int"),
    ("cannot be iterated", "Model.forward iterates over a tensor or a size in Python"),
    ("unknown to einops", "Model.forward calls einops (rearrange, reduce, ...), which torch.fx cannot follow"),
)


# ----------------------------------------------------------------------------------------------- lowering


class _Lowerer:
    """fx graph (with meta values) → IR values; composite ops are expanded here."""

    def __init__(self, gm: fx.GraphModule, model: torch.nn.Module, filename: str = "<task>"):
        self.gm, self.model, self.filename = gm, model, filename
        self.vals: list[_Val] = []
        self.params: dict[str, _Val] = {}
        self.env: dict[fx.Node, Any] = {}
        self.outputs: Any = None
        self.node: fx.Node | None = None
        self.node_dtype: Any = None
        self.cse: dict[tuple, _Val] = {}

    # -- value constructors
    def new(self, kind: str, op: str, args: tuple = (), params: dict | None = None, shape: tuple | None = None,
            dtype: Any = None, value: Any = None, render: Any = None) -> _Val:
        key = None
        if kind in ("ew", "red", "mm"):  # the same computation twice (softmax inside logsumexp, x * x, ...)
            key = (kind, op, tuple(("v", a.id) if isinstance(a, _Val) else ("c", type(a).__name__, a) for a in args),
                   tuple(sorted((params or {}).items())), dtype)
            if key in self.cse:
                return self.cse[key]
        v = _Val(len(self.vals), kind, op, tuple(args), dict(params or {}), None if shape is None else tuple(shape),
                 dtype, value, self.node.name if self.node is not None else "", render)
        self.vals.append(v)
        if key is not None:
            self.cse[key] = v
        return v

    def here(self) -> str:
        """The node being lowered, as messages name it: "task.py:12: nn.Conv2d (call_module conv)"."""
        if self.node is None:
            return "?"
        line = _node_line(self.node, self.filename)
        return f"{self.filename}:{line}: {_describe(self.node, self.gm)}" if line else _describe(self.node, self.gm)

    def unsupported(self, why: str) -> SeedUnsupported:
        return SeedUnsupported(f"{self.here()}: {why}")

    def const(self, x: Any) -> Any:
        """A structural argument (dims, shapes, eps, slopes): specialised to its trace-time value."""
        if isinstance(x, _Val):
            if x.tensor:
                raise self.unsupported("a tensor where a constant is expected")
            return x.value
        if isinstance(x, (list, tuple)):
            return type(x)(self.const(e) for e in x)
        return x

    def param(self, path: str) -> _Val:
        if path not in self.params:
            obj: Any = self.model
            try:
                for part in path.split("."):
                    obj = getattr(obj, part)
            except AttributeError:
                raise SeedUnsupported(f"{_at(self.filename, _node_line(self.node, self.filename))}get_attr {path}: "
                                      "a tensor created in forward (not an attribute of Model) has no template") from None
            if not isinstance(obj, torch.Tensor):
                raise SeedUnsupported(f"{_at(self.filename, _node_line(self.node, self.filename))}get_attr {path}: "
                                      f"not a tensor ({type(obj).__name__})")
            v = self.new("param", "param", params={"path": path}, shape=tuple(obj.shape), dtype=obj.dtype)
            v.origin = path
            self.params[path] = v
        return self.params[path]

    def attr_scalar(self, path: str, value: Any) -> _Val:
        """A float attribute of the model (`self.scale`, a module's eps), read from `self` at run time."""
        key = ("attr", path)
        if key not in self.cse:
            v = self.new("glue", "attr", value=value,
                         render=lambda nm, p=path: f"_ks_attr(self, {p!r})")
            v.params["path"] = path
            self.cse[key] = v
        return self.cse[key]

    def hyper(self, mod: Any, path: str, name: str) -> Any:
        value = getattr(mod, name)
        return self.attr_scalar(f"{path}.{name}", value) if type(value) is float else value

    def _check_float(self, v: _Val) -> None:
        if v.dtype not in FLOAT_DTYPES:
            raise self.unsupported(f"{v.dtype} tensors have no template (floating point only)")

    def ew(self, op: str, *args: Any, dtype: Any = None, _inplace: Any = False, **params: Any) -> _Val:
        assert op in T.EW_OPS, op
        if self.const(_inplace):
            self._inplace_ok(self.node)
        tensors = [a for a in args if isinstance(a, _Val) and a.tensor]
        if not tensors:
            raise self.unsupported("elementwise op without a tensor operand")
        for a in args:
            if isinstance(a, _Val):
                if a.tensor:
                    self._check_float(a)
                elif not isinstance(a.value, (int, float, bool)):
                    raise self.unsupported(f"operand {a.value!r} is not a number")
            elif not isinstance(a, (int, float, bool)):
                raise self.unsupported(f"operand {a!r} is not a tensor or a number")
        shape = _broadcast([t.shape for t in tensors])
        if dtype is None:
            dtype = self.node_dtype if self.node_dtype in FLOAT_DTYPES else tensors[0].dtype
        return self.new("ew", op, args, params, shape, dtype)

    def red(self, kind: str, x: Any, dim: Any, keepdim: Any, correction: float = 0.0) -> _Val:
        if not (isinstance(x, _Val) and x.tensor):
            raise self.unsupported("reduction of a non-tensor")
        self._check_float(x)
        dim, keepdim = self.const(dim), bool(self.const(keepdim))
        nd = len(x.shape)
        if nd == 0:
            raise self.unsupported("reduction of a 0-d tensor")
        spec = None
        if dim is not None and dim != () and dim != []:
            spec = tuple(int(d) for d in (dim if isinstance(dim, (list, tuple)) else (dim,)))
        norm = sorted({d % nd for d in spec}) if spec else list(range(nd))
        if norm != list(range(norm[0], norm[-1] + 1)):
            raise self.unsupported(f"reduction over non-contiguous dims {spec}")
        a, b = norm[0], norm[-1] + 1
        shape = x.shape[:a] + ((1,) * (b - a) if keepdim else ()) + x.shape[b:]
        dtype = self.node_dtype if self.node_dtype in FLOAT_DTYPES else x.dtype
        return self.new("red", kind, (x,), {"spec": spec, "block": (a, b), "keepdim": keepdim,
                                            "correction": float(correction)}, shape, dtype)

    def mm(self, a: Any, b: Any, linear: bool) -> _Val:
        for t in (a, b):
            if not (isinstance(t, _Val) and t.tensor):
                raise self.unsupported("matmul of a non-tensor")
            if t.dtype not in DOT_DTYPES:
                raise self.unsupported(f"matmul of {t.dtype} tensors has no template")
        if a.dtype != b.dtype:
            raise self.unsupported(f"matmul of mixed dtypes {a.dtype} and {b.dtype}")
        if len(a.shape) < 2 or len(b.shape) < 2:
            raise self.unsupported("matmul with a 1-D operand has no template")
        if linear:
            if len(b.shape) != 2 or b.shape[1] != a.shape[-1]:
                raise self.unsupported(f"linear weight of shape {b.shape}")
            batched, n = False, b.shape[0]
        elif len(b.shape) == 2:
            batched, n = False, b.shape[1]
        elif len(a.shape) == len(b.shape) and a.shape[:-2] == b.shape[:-2]:
            batched, n = True, b.shape[-1]
        else:
            raise self.unsupported(f"matmul of shapes {a.shape} and {b.shape} (broadcast batch dims)")
        return self.new("mm", "mm", (a, b), {"linear": linear, "batched": batched}, a.shape[:-1] + (n,), a.dtype)

    def glue(self, render: Any, op: str, args: Any) -> _Val:
        val = self.node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return self.new("glue", op, tuple(_flat(args)), shape=tuple(val.shape), dtype=val.dtype, render=render)
        return self.new("glue", op, tuple(_flat(args)), value=val, render=render)

    # -- the walk
    def run(self) -> None:
        for node in self.gm.graph.nodes:
            self.node = node
            val = node.meta.get("val")
            self.node_dtype = val.dtype if isinstance(val, torch.Tensor) else None
            if node.op == "placeholder":
                if isinstance(val, torch.Tensor):
                    v = self.new("input", node.target, shape=tuple(val.shape), dtype=val.dtype)
                    v.params["name"] = node.target
                    self.env[node] = v
                else:
                    self.env[node] = val
            elif node.op == "get_attr":
                self.env[node] = self.param(node.target)
            elif node.op == "output":
                self.outputs = fx.node.map_arg(node.args[0], lambda n: self.env[n])
            else:
                try:
                    out = self.call(node)
                except SeedUnsupported as exc:  # raised below the node's handler (broadcasting, ...): say where
                    if self.here() in str(exc):
                        raise
                    raise SeedUnsupported(f"{self.here()}: {exc}") from None
                if isinstance(out, _Val) and out.tensor:
                    if not isinstance(val, torch.Tensor) or tuple(val.shape) != out.shape:
                        got = tuple(val.shape) if isinstance(val, torch.Tensor) else type(val).__name__
                        raise SeedUnsupported(f"{self.here()}: internal shape mismatch ({out.shape} vs {got})")
                    out.dtype = val.dtype
                self.env[node] = out

    def _attrs(self, obj: Any) -> Any:
        if isinstance(obj, _AttrRef):
            return self.attr_scalar(obj.path, obj.value)
        if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
            return type(obj)(self._attrs(o) for o in obj)
        if isinstance(obj, dict):
            return {k: self._attrs(o) for k, o in obj.items()}
        return obj

    def _inplace_ok(self, node: fx.Node) -> None:
        """An in-place op equals its functional form when nothing later reads the mutated value."""
        target = node.args[0] if node.args else None
        if not isinstance(target, fx.Node):
            return
        if target.op == "get_attr":
            raise self.unsupported("in-place update of a parameter")
        order = {n: i for i, n in enumerate(self.gm.graph.nodes)}
        if any(u is not node and order[u] > order[node] for u in target.users):
            raise self.unsupported("in-place op on a value that is read again later")

    def call(self, node: fx.Node) -> Any:
        args = self._attrs(fx.node.map_arg(node.args, lambda n: self.env[n]))
        kwargs = dict(self._attrs(fx.node.map_arg(node.kwargs, lambda n: self.env[n])))
        if node.op == "call_module":
            mod = self.gm.get_submodule(node.target)
            if getattr(mod, "inplace", False):
                self._inplace_ok(node)
            handler = getattr(self, f"mod_{type(mod).__name__}", None)
            if handler is None or not type(mod).__module__.startswith("torch.nn"):
                raise SeedUnsupported(f"{self.here()} has no template")
            return handler(mod, node.target, *args, **kwargs)
        if node.op == "call_method":
            name, ns = node.target, "method"
        else:
            ns, name = _qualname(node.target)
            if ns not in ("torch", "torch.nn.functional", "operator", "builtins", "torch.special"):
                raise SeedUnsupported(f"{self.here()} has no template")
        if name in _SKIP:
            return None
        if name.endswith("_") and not name.startswith("_") and hasattr(self, f"op_{_canon(name[:-1])}"):
            self._inplace_ok(node)  # x.relu_(), torch.relu_(x), x.add_(y)
            name = name[:-1]
        if ns == "operator" and name.startswith("i") and name[1:] in _PY_OPS:  # x += y
            name = name[1:]
        name = _canon(name)
        tensor_args = [a for a in _flat([args, kwargs]) if a.tensor]
        pair = args[0] if args and isinstance(args[0], _Pair) else None
        if pair is not None:
            return self._pair_access(pair, name, args)
        if name in _IDENTITY and tensor_args:
            return args[0]
        if not tensor_args:
            return self._python_glue(node, ns, name, args, kwargs)
        if (ns == "method" and name in _GLUE_METHODS) or (ns == "torch" and name in _GLUE_FUNCTIONS) or (
                ns == "builtins" and name == "getattr") or (ns == "operator" and name == "getitem"):
            return self._tensor_glue(node, ns, name, args, kwargs)
        handler = getattr(self, f"op_{name}", None)
        if handler is None:
            raise SeedUnsupported(f"{self.here()} has no template")
        try:
            return handler(*args, **kwargs)
        except TypeError as exc:  # a signature we did not anticipate
            raise self.unsupported(f"unexpected arguments ({exc})") from None

    def _pair_access(self, pair: _Pair, name: str, args: tuple) -> Any:
        if (name == "getitem" and args[1] == 0) or (name == "getattr" and args[1] == "values"):
            return pair.values
        raise self.unsupported("the indices of max/min (argmax) have no template")

    # -- glue: Python code left to torch / the interpreter in forward
    def _python_glue(self, node: fx.Node, ns: str, name: str, args: tuple, kwargs: dict) -> _Val:
        if ns == "operator" and (name in _PY_OPS or name in ("neg", "getitem")):
            def render(nm: Any, a: tuple = args) -> str:
                if name == "neg":
                    return f"(-{_arg(a[0], nm)})"
                if name == "getitem":
                    return f"{_arg(a[0], nm)}[{_index(a[1], nm)}]"
                return f"({_arg(a[0], nm)} {_PY_OPS[name]} {_arg(a[1], nm)})"
            return self.glue(render, name, args)
        if ns == "builtins" and name == "getattr":
            return self.glue(lambda nm, a=args: f"{_arg(a[0], nm)}.{a[1]}", name, args)
        raise SeedUnsupported(f"{self.here()} has no template")

    def _tensor_glue(self, node: fx.Node, ns: str, name: str, args: tuple, kwargs: dict) -> _Val:
        if name == "getitem":
            for idx in _flat(args[1]):
                if idx.tensor:
                    raise self.unsupported("indexing with a tensor has no template")
            return self.glue(lambda nm, a=args: f"{_arg(a[0], nm)}[{_index(a[1], nm)}]", name, args)
        if name == "getattr":
            if args[1] not in ("shape", "dtype", "device", "ndim", "T", "mT"):
                raise self.unsupported(f"tensor attribute {args[1]!r} has no template")
            return self.glue(lambda nm, a=args: f"{_arg(a[0], nm)}.{a[1]}", name, args)
        target = node.target

        def render(nm: Any, a: tuple = args, kw: dict = kwargs) -> str:
            parts = [_arg(x, nm) for x in (a[1:] if ns == "method" else a)]
            parts += [f"{k}={_arg(x, nm)}" for k, x in kw.items()]
            head = f"{_arg(a[0], nm)}.{target}" if ns == "method" else f"torch.{name}"
            return f"{head}({', '.join(parts)})"
        return self.glue(render, name, [args, kwargs])

    # -- elementwise ops (torch.*, F.*, methods and operators share these by name)
    def op_relu(self, input, inplace=False): return self.ew("relu", input, _inplace=inplace)
    def op_relu6(self, input, inplace=False): return self.ew("relu6", input, _inplace=inplace)
    def op_sigmoid(self, input): return self.ew("sigmoid", input)
    def op_tanh(self, input): return self.ew("tanh", input)
    def op_silu(self, input, inplace=False): return self.ew("silu", input, _inplace=inplace)
    def op_mish(self, input, inplace=False): return self.ew("mish", input, _inplace=inplace)
    def op_selu(self, input, inplace=False): return self.ew("selu", input, _inplace=inplace)
    def op_hardswish(self, input, inplace=False): return self.ew("hardswish", input, _inplace=inplace)
    def op_hardsigmoid(self, input, inplace=False): return self.ew("hardsigmoid", input, _inplace=inplace)
    def op_logsigmoid(self, input): return self.ew("logsigmoid", input)
    def op_softsign(self, input): return self.ew("softsign", input)
    def op_exp(self, input): return self.ew("exp", input)
    def op_log(self, input): return self.ew("log", input)
    def op_abs(self, input): return self.ew("abs", input)
    def op_neg(self, input): return self.ew("neg", input)
    def op_sqrt(self, input): return self.ew("sqrt", input)
    def op_rsqrt(self, input): return self.ew("rsqrt", input)
    def op_reciprocal(self, input): return self.ew("reciprocal", input)
    def op_erf(self, input): return self.ew("erf", input)
    def op_sin(self, input): return self.ew("sin", input)
    def op_cos(self, input): return self.ew("cos", input)
    def op_floor(self, input): return self.ew("floor", input)
    def op_ceil(self, input): return self.ew("ceil", input)
    def op_square(self, input): return self.ew("square", input)
    def op_log1p(self, input): return self.ew("log1p", input)
    def op_expm1(self, input): return self.ew("expm1", input)
    def op_log2(self, input): return self.ew("log2", input)
    def op_log10(self, input): return self.ew("log10", input)
    def op_exp2(self, input): return self.ew("exp2", input)
    def op_sign(self, input): return self.ew("sign", input)
    def op_trunc(self, input): return self.ew("trunc", input)
    def op_pos(self, input): return input

    def op_gelu(self, input, approximate="none"):
        approximate = self.const(approximate)
        if approximate not in ("none", "tanh"):
            raise self.unsupported(f"gelu approximate={approximate!r}")
        return self.ew("gelu_tanh" if approximate == "tanh" else "gelu", input)

    def op_leaky_relu(self, input, negative_slope=0.01, inplace=False):
        return self.ew("leaky_relu", input, negative_slope, _inplace=inplace)

    def op_elu(self, input, alpha=1.0, inplace=False):
        return self.ew("elu", input, alpha, _inplace=inplace)

    def op_softplus(self, input, beta=1.0, threshold=20.0):
        return self.ew("softplus", input, beta, threshold)

    def op_hardtanh(self, input, min_val=-1.0, max_val=1.0, inplace=False):
        if self.const(inplace):
            self._inplace_ok(self.node)
        return self.op_clamp(input, min_val, max_val)

    def op_clamp(self, input, min=None, max=None):
        if isinstance(min, _Val) and min.tensor or isinstance(max, _Val) and max.tensor:
            lo = self.op_maximum(input, min) if min is not None else input
            return self.op_minimum(lo, max) if max is not None else lo
        if min is None and max is None:
            raise self.unsupported("clamp without bounds")
        args = [input] + [b for b in (min, max) if b is not None]
        return self.ew("clamp", *args, min=min is not None, max=max is not None)

    def op_clamp_min(self, input, min): return self.op_clamp(input, min=min)
    def op_clamp_max(self, input, max): return self.op_clamp(input, max=max)

    def op_add(self, input, other, alpha=1):
        alpha = self.const(alpha)
        return self.ew("add", input, other if alpha == 1 else self.op_mul(other, alpha))

    def op_sub(self, input, other, alpha=1):
        alpha = self.const(alpha)
        return self.ew("sub", input, other if alpha == 1 else self.op_mul(other, alpha))

    def op_rsub(self, input, other, alpha=1):
        return self.op_sub(other, input, alpha)

    def op_mul(self, input, other):
        if not (isinstance(input, _Val) and input.tensor or isinstance(other, _Val) and other.tensor):
            raise self.unsupported("multiplication of two non-tensors")
        return self.ew("mul", input, other)

    def op_div(self, input, other, rounding_mode=None):
        if self.const(rounding_mode) is not None:
            raise self.unsupported(f"div with rounding_mode={rounding_mode!r} has no template")
        return self.ew("div", input, other)

    def op_maximum(self, input, other): return self.ew("maximum", input, other)
    def op_minimum(self, input, other): return self.ew("minimum", input, other)

    def op_pow(self, input, exponent):
        if isinstance(exponent, _Val) and exponent.tensor:
            if isinstance(input, _Val) and input.tensor:
                raise self.unsupported("pow with a tensor exponent has no template")
            base = float(self.const(input))
            if base <= 0:
                raise self.unsupported("pow of a non-positive scalar base")
            return self.ew("rpow", exponent, base=base)
        return self.ew("pow", input, exponent=float(self.const(exponent)))

    # -- casts
    def _cast(self, x, dtype):
        if dtype is None:
            return x
        dtype = self.const(dtype)
        if dtype not in FLOAT_DTYPES:
            raise self.unsupported(f"cast to {dtype} has no template (floating point only)")
        return self.ew("cast", x, dtype=dtype, to=dtype) if x.dtype != dtype else x

    def op_float(self, input): return self._cast(input, torch.float32)
    def op_half(self, input): return self._cast(input, torch.float16)
    def op_bfloat16(self, input): return self._cast(input, torch.bfloat16)
    def op_double(self, input): return self._cast(input, torch.float64)
    def op_type_as(self, input, other): return self._cast(input, other.dtype)

    def op_type(self, input, dtype=None):
        if dtype is None:
            raise self.unsupported("Tensor.type() without a dtype")
        return self._cast(input, dtype)

    def op_to(self, input, *args, **kwargs):
        dtype = kwargs.get("dtype")
        for a in args:
            a = self.const(a) if not (isinstance(a, _Val) and a.tensor) else a
            if isinstance(a, torch.dtype):
                dtype = a
            elif isinstance(a, _Val):
                dtype = a.dtype
        return self._cast(input, dtype)

    # -- reductions and what is lowered to them
    def op_sum(self, input, dim=None, keepdim=False, dtype=None):
        return self.red("sum", self._cast(input, dtype), dim, keepdim)

    def op_mean(self, input, dim=None, keepdim=False, dtype=None):
        return self.red("mean", self._cast(input, dtype), dim, keepdim)

    def op_amax(self, input, dim=(), keepdim=False): return self.red("max", input, dim, keepdim)
    def op_amin(self, input, dim=(), keepdim=False): return self.red("min", input, dim, keepdim)

    def _maxmin(self, kind, input, dim, keepdim):
        if isinstance(dim, _Val) and dim.tensor:
            return self.ew("maximum" if kind == "max" else "minimum", input, dim)
        if dim is None:
            return self.red(kind, input, None, False)
        return _Pair(self.red(kind, input, dim, keepdim), self.here())

    def op_max(self, input, dim=None, keepdim=False, other=None):
        return self._maxmin("max", input, other if other is not None else dim, keepdim)

    def op_min(self, input, dim=None, keepdim=False, other=None):
        return self._maxmin("min", input, other if other is not None else dim, keepdim)

    def op_var(self, input, dim=None, unbiased=None, keepdim=False, correction=None, _sqrt=False):
        dim = self.const(dim)
        if isinstance(dim, bool):
            unbiased, dim = dim, None
        c = self.const(correction) if correction is not None else (1 if unbiased is None else int(self.const(unbiased)))
        m = self.red("mean", input, dim, True)
        d = self.ew("sub", input, m)
        v = self.red("sumdiv", self.ew("mul", d, d), dim, keepdim, correction=c)
        return self.ew("sqrt", v) if _sqrt else v

    def op_std(self, input, dim=None, unbiased=None, keepdim=False, correction=None):
        return self.op_var(input, dim, unbiased, keepdim, correction, _sqrt=True)

    def op_logsumexp(self, input, dim, keepdim=False):
        m = self.red("max", input, dim, True)
        s = self.red("sum", self.ew("exp", self.ew("sub", input, m)), dim, keepdim)
        mk = m if self.const(keepdim) else self.red("max", input, dim, False)
        return self.ew("add", self.ew("log", s), mk)

    def _softmax(self, input, dim, stacklevel, dtype, log):
        if isinstance(stacklevel, torch.dtype):
            dtype = stacklevel
        if self.const(dim) is None:
            raise self.unsupported("softmax without dim (implicit dim) has no template")
        x = self._cast(input, dtype)
        m = self.red("max", x, dim, True)
        z = self.ew("sub", x, m)
        e = self.ew("exp", z)
        s = self.red("sum", e, dim, True)
        return self.ew("sub", z, self.ew("log", s)) if log else self.ew("div", e, s)

    def op_softmax(self, input, dim=None, _stacklevel=3, dtype=None):
        return self._softmax(input, dim, _stacklevel, dtype, log=False)

    def op_log_softmax(self, input, dim=None, _stacklevel=3, dtype=None):
        return self._softmax(input, dim, _stacklevel, dtype, log=True)

    def op_layer_norm(self, input, normalized_shape, weight=None, bias=None, eps=1e-5, cudnn_enable=None):
        k = len(self.const(normalized_shape))
        dims = tuple(range(-k, 0))
        m = self.red("mean", input, dims, True)
        d = self.ew("sub", input, m)
        var = self.red("mean", self.ew("mul", d, d), dims, True)
        y = self.ew("mul", d, self.ew("rsqrt", self.ew("add", var, eps)))
        if weight is not None:
            y = self.ew("mul", y, weight)
        return self.ew("add", y, bias) if bias is not None else y

    def op_rms_norm(self, input, normalized_shape, weight=None, eps=None):
        k = len(self.const(normalized_shape))
        if self.const(eps) is None:
            eps = torch.finfo(input.dtype).eps
        ms = self.red("mean", self.ew("mul", input, input), tuple(range(-k, 0)), True)
        y = self.ew("mul", input, self.ew("rsqrt", self.ew("add", ms, eps)))
        return self.ew("mul", y, weight) if weight is not None else y

    def op_dropout(self, input, p=0.5, training=True, inplace=False):
        if float(self.const(p)) == 0.0 or not self.const(training):
            return input
        raise self.unsupported("dropout with p > 0 in training mode is random")

    # -- matmuls
    def op_linear(self, input, weight, bias=None):
        y = self.mm(input, weight, linear=True)
        return self.ew("add", y, bias) if bias is not None else y

    def op_matmul(self, input, other):
        return self.mm(input, other, linear=False)

    def op_addmm(self, input, mat1, mat2, beta=1, alpha=1):
        beta, alpha = float(self.const(beta)), float(self.const(alpha))
        y = self.mm(mat1, mat2, linear=False)
        if beta == 0:
            return self.ew("mul", y, alpha) if alpha != 1 else y
        if alpha != beta:
            y = self.ew("mul", y, alpha / beta)
        y = self.ew("add", y, input)
        return self.ew("mul", y, beta) if beta != 1 else y

    # -- nn modules
    def mod_Linear(self, mod, path, input):
        bias = self.param(f"{path}.bias") if mod.bias is not None else None
        return self.op_linear(input, self.param(f"{path}.weight"), bias)

    def mod_ReLU(self, mod, path, input): return self.op_relu(input)
    def mod_ReLU6(self, mod, path, input): return self.op_relu6(input)
    def mod_GELU(self, mod, path, input): return self.op_gelu(input, mod.approximate)
    def mod_SiLU(self, mod, path, input): return self.op_silu(input)
    def mod_Sigmoid(self, mod, path, input): return self.op_sigmoid(input)
    def mod_Tanh(self, mod, path, input): return self.op_tanh(input)
    def mod_Mish(self, mod, path, input): return self.op_mish(input)
    def mod_SELU(self, mod, path, input): return self.op_selu(input)
    def mod_Hardswish(self, mod, path, input): return self.op_hardswish(input)
    def mod_Hardsigmoid(self, mod, path, input): return self.op_hardsigmoid(input)
    def mod_LogSigmoid(self, mod, path, input): return self.op_logsigmoid(input)
    def mod_Softsign(self, mod, path, input): return self.op_softsign(input)
    def mod_LeakyReLU(self, mod, path, input): return self.op_leaky_relu(input, self.hyper(mod, path, "negative_slope"))
    def mod_ELU(self, mod, path, input): return self.op_elu(input, self.hyper(mod, path, "alpha"))
    def mod_Softplus(self, mod, path, input):
        return self.op_softplus(input, self.hyper(mod, path, "beta"), self.hyper(mod, path, "threshold"))
    def mod_Hardtanh(self, mod, path, input):
        return self.op_clamp(input, self.hyper(mod, path, "min_val"), self.hyper(mod, path, "max_val"))
    def mod_Identity(self, mod, path, input, *args, **kwargs): return input
    def mod_Softmax(self, mod, path, input): return self.op_softmax(input, mod.dim)
    def mod_LogSoftmax(self, mod, path, input): return self.op_log_softmax(input, mod.dim)

    def mod_Dropout(self, mod, path, input):
        return self.op_dropout(input, mod.p, mod.training)

    def mod_LayerNorm(self, mod, path, input):
        w = self.param(f"{path}.weight") if getattr(mod, "weight", None) is not None else None
        b = self.param(f"{path}.bias") if getattr(mod, "bias", None) is not None else None
        return self.op_layer_norm(input, mod.normalized_shape, w, b, self.hyper(mod, path, "eps"))

    def mod_RMSNorm(self, mod, path, input):
        w = self.param(f"{path}.weight") if getattr(mod, "weight", None) is not None else None
        return self.op_rms_norm(input, mod.normalized_shape, w, self.hyper(mod, path, "eps"))

    def mod_Flatten(self, mod, path, input):
        s, e = mod.start_dim, mod.end_dim
        return self.glue(lambda nm, x=input: f"torch.flatten({nm(x)}, {s}, {e})", "flatten", [input])


def _arg(a: Any, nm: Any) -> str:
    """Python source for a glue argument."""
    if isinstance(a, _Val):
        return nm(a)
    if isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
        inner = ", ".join(_arg(x, nm) for x in a)
        return f"[{inner}]" if isinstance(a, list) else (f"({inner},)" if len(a) == 1 else f"({inner})")
    if isinstance(a, torch.Size):
        return repr(tuple(a))
    if isinstance(a, (torch.dtype, torch.memory_format)):
        return str(a)
    if isinstance(a, torch.device):
        return f"torch.device({str(a)!r})"
    if isinstance(a, slice):
        return f"slice({_arg(a.start, nm)}, {_arg(a.stop, nm)}, {_arg(a.step, nm)})"
    if a is Ellipsis:
        return "..."
    if isinstance(a, float) and not math.isfinite(a):
        return f'float("{a}")'
    if a is None or isinstance(a, (bool, int, float, str)):
        return repr(a)
    raise SeedUnsupported(f"cannot write {a!r} as Python source")


def _index(idx: Any, nm: Any) -> str:
    def one(i: Any) -> str:
        if isinstance(i, slice):
            parts = ["" if p is None else _arg(p, nm) for p in (i.start, i.stop, i.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if parts[2] else "")
        return _arg(i, nm)
    if isinstance(idx, tuple):
        return ", ".join(one(i) for i in idx) + ("," if len(idx) == 1 else "")
    return one(idx)


# ------------------------------------------------------------------------------------------------- fusion


class _Group:
    """One kernel: its IR members, its template and its iteration domain."""

    def __init__(self, index: int, kind: str, domain: tuple):
        self.index, self.kind, self.domain = index, kind, domain
        self.members: list[_Val] = []
        self.space: dict[_Val, str] = {}     # full | keep | nokeep (reduced, with or without kept dims)
        self.spec: tuple | None = None        # reduction dims as written (None: all)
        self.block: tuple[int, int] = (0, 0)  # reduced dims at trace time, half-open
        self.outputs: list[_Val] = []
        self.name = ""

    def add(self, v: _Val, space: str) -> None:
        self.members.append(v)
        self.space[v] = space

    def to_reduction(self, v: _Val) -> None:
        self.kind, self.spec, self.block = "red", v.params["spec"], v.params["block"]

    def shapes(self) -> tuple[tuple, tuple, tuple]:
        a, b = self.block
        s = self.domain
        return s, s[:a] + (1,) * (b - a) + s[b:], s[:a] + s[b:]


class _Fuser:
    def __init__(self, vals: list[_Val]):
        self.vals = vals
        self.group_of: dict[_Val, _Group] = {}
        self.groups: list[_Group] = []

    def avail(self, v: _Val) -> frozenset[int]:
        """Kernels that must have run before `v` exists outside them."""
        if v in self.group_of:
            return frozenset({self.group_of[v].index})
        if v.kind == "glue":
            return frozenset().union(*[self.avail(a) for a in v.args]) if v.args else frozenset()
        return frozenset()

    def fits(self, g: _Group, v: _Val) -> str | None:
        """The space `v` would have in `g`, or None when it cannot join."""
        if v.kind == "mm":
            return None
        inside = [a for a in _flat(v.args) if self.group_of.get(a) is g]
        if not inside and not (v.kind == "red" or g.kind == "ew"):
            return None  # horizontal joins: reductions of one geometry, or elementwise ops of one domain
        for a in _flat(v.args):
            if self.group_of.get(a) is not g and any(i >= g.index for i in self.avail(a)):
                return None
        spaces = {g.space[a] for a in inside}
        if g.kind in ("ew", "mm"):
            if v.kind == "ew" and v.shape == g.domain:
                return "full"
            if g.kind == "ew" and v.kind == "red" and v.args[0].shape == g.domain:
                return "keep" if v.params["keepdim"] else "nokeep"
            return None
        if v.kind == "red":
            x = v.args[0]
            full = g.space.get(x) == "full" if x in g.space else x.shape == g.domain
            if full and v.params["block"] == g.block:
                return "keep" if v.params["keepdim"] else "nokeep"
            return None
        s, sk, sn = g.shapes()
        if spaces <= {"keep"} and v.shape == sk:
            return "keep"
        if "nokeep" not in spaces and v.shape == s:
            return "full"
        if spaces == {"nokeep"} and v.shape == sn:
            return "nokeep"
        return None

    def run(self, live: set[_Val]) -> list[_Group]:
        for v in self.vals:
            if v not in live or v.kind not in ("ew", "red", "mm"):
                continue
            # The newest kernel producing an operand first; then any other kernel of the same iteration space
            # (independent reductions over the same dims, a second elementwise output): `fits` refuses any
            # kernel that would have to wait for one of v's operands, so kernels never depend on later ones.
            owners = [self.group_of[a] for a in _flat(v.args) if a in self.group_of]
            newest = max(owners, key=lambda x: x.index) if owners else None
            g, space = None, None
            for cand in ([newest] if newest else []) + [x for x in reversed(self.groups) if x is not newest]:
                space = self.fits(cand, v)
                if space is not None:
                    g = cand
                    break
            if space is None:
                if v.kind == "mm":
                    g, space = _Group(len(self.groups), "mm", v.shape), "full"
                elif v.kind == "red":
                    g = _Group(len(self.groups), "red", v.args[0].shape)
                    g.to_reduction(v)
                    space = "keep" if v.params["keepdim"] else "nokeep"
                else:
                    g, space = _Group(len(self.groups), "ew", v.shape), "full"
                self.groups.append(g)
            elif v.kind == "red" and g.kind == "ew":
                g.to_reduction(v)
            g.add(v, space)
            self.group_of[v] = g
        return self.groups


# ---------------------------------------------------------------------------------------------- code gen


_RED_INIT = {"max": 'float("-inf")', "min": 'float("inf")'}
_DTYPE_NAMES = {torch.float16: "torch.float16", torch.bfloat16: "torch.bfloat16", torch.float32: "torch.float32",
                torch.float64: "torch.float64"}


class _KernelWriter:
    """Writes one group's @triton.jit kernel and its Python launcher."""

    def __init__(self, g: _Group, group_of: dict[_Val, _Group], name: str):
        self.g, self.group_of, self.name = g, group_of, name
        self.ext: list[tuple[_Val, str]] = []   # (value, space) read through _ks_bc
        self.scalars: list[_Val] = []           # Python numbers computed in forward
        self.args: list[_Val] = []              # launcher parameters, in order

    def _arg(self, v: _Val) -> str:
        if v not in self.args:
            self.args.append(v)
        return f"a{self.args.index(v)}"

    def operand(self, a: Any, space: str) -> str:
        if isinstance(a, _Val):
            if self.group_of.get(a) is self.g:
                return f"v{a.id}"
            if a.tensor:
                if (a, space) not in self.ext:
                    self.ext.append((a, space))
                    self._arg(a)
                return f"x{self.ext.index((a, space))}"
            if a not in self.scalars:
                self.scalars.append(a)
                self._arg(a)
            return f"c{self.scalars.index(a)}"
        return T.literal(a)

    def expr(self, v: _Val) -> str:
        space = self.g.space[v]
        return T.ew_expr(v.op, [self.operand(a, space) for a in v.args], v.params)

    def ext_used(self, lines: list[str]) -> list[int]:
        text = "\n".join(lines)
        return [k for k, (_, sp) in enumerate(self.ext) if sp == "full" and f"x{k}" in _tokens(text)]

    def dtype_expr(self, v: _Val) -> str:
        for a in self.args:
            if a.tensor and a.dtype == v.dtype:
                return f"{self._pname(a)}.dtype"
        return _DTYPE_NAMES.get(v.dtype, str(v.dtype))

    def _pname(self, a: _Val) -> str:
        return f"a{self.args.index(a)}"

    def doc(self) -> str:
        ops = []
        for m in self.g.members:
            ops.append(("linear" if m.params["linear"] else "matmul") if m.kind == "mm" else m.op)
        return f"{TEMPLATES[self.g.kind]}: " + ", ".join(ops)

    # -- the three templates
    def write(self) -> tuple[str, str]:
        return {"ew": self._elementwise, "red": self._reduction, "mm": self._matmul}[self.g.kind]()

    def _stores(self, pad: str, spaces: tuple[str, ...], index: str, mask: str) -> list[str]:
        return [T.store(k, f"v{o.id}", index, mask, pad) for k, o in enumerate(self.g.outputs)
                if self.g.space[o] in spaces]

    def _launch(self, grid: str, sizes: list[str], consts: list[str], warps: str, stages: str = "") -> list[str]:
        call = [f"t{k}" for k in range(len(self.ext))] + [f"o{k}" for k in range(len(self.g.outputs))] + sizes
        call += [f"i{k}, s{k}" for k in range(len(self.ext))]
        call += [f"float({self._pname(c)})" for c in self.scalars]
        call += [f"B{k}=m{k}" for k in range(len(self.ext))] + consts + ["num_warps=num_warps"]
        if stages:
            call.append(f"num_stages={stages}")
        lines, cur = [], ""
        for item in call:
            if cur and len(cur) + len(item) + 2 > 96:
                lines.append("    " + cur + ",")
                cur = item
            else:
                cur = f"{cur}, {item}" if cur else item
        lines.append("    " + cur + ",")
        return [f"num_warps = {warps}", f"{self.name}_kernel[{grid}](", *lines, ")"]

    def _elementwise(self) -> tuple[str, str]:
        body = [f"    v{m.id} = {self.expr(m)}" for m in self.g.members]
        loads = [ln for k in range(len(self.ext)) for ln in T.load(k, "offs", "mask", "    ")]
        body = loads + body + self._stores("    ", ("full",), "offs", "mask")
        kernel = T.elementwise_kernel(f"{self.name}_kernel", self.doc(), len(self.ext), len(self.g.outputs),
                                      len(self.scalars), body)
        shapes = ", ".join(f"{self._pname(a)}.shape" for a, _ in self.ext)
        py = [f"shape = _ks_bshape({shapes})", "n = _ks_prod(shape)"]
        py += self._allocs({"full": "shape"})
        py += [f"t{k}, m{k}, i{k}, s{k} = _ks_bc({self._pname(a)}, shape)" for k, (a, _) in enumerate(self.ext)]
        py += ["if n > 0:", "    block = min(_ks_np2(n), 2048)"]
        py += ["    " + ln for ln in self._launch("(triton.cdiv(n, block),)", ["n"], ["BLOCK=block"],
                                                   "4 if block <= 1024 else 8")]
        return kernel, self._launcher(py)

    def _allocs(self, shapes: dict[str, str]) -> list[str]:
        first = next(a for a in self.args if a.tensor)
        return [f"o{k} = torch.empty({shapes[self.g.space[o]]}, dtype={self.dtype_expr(o)}, "
                f"device={self._pname(first)}.device)" for k, o in enumerate(self.g.outputs)]

    def _launcher(self, body: list[str]) -> str:
        params = ", ".join(f"a{i}" for i in range(len(self.args)))
        outs = ", ".join(f"o{k}" for k in range(len(self.g.outputs)))
        lines = [f"def {self.name}({params}):", f'    """{self.doc()}"""']
        lines += ["    " + ln for ln in body] + [f"    return {outs}"]
        return "\n".join(lines) + "\n"

    def _matmul(self) -> tuple[str, str]:
        g = self.g
        mmv = g.members[0]
        a_val, b_val = mmv.args
        self._arg(a_val)
        self._arg(b_val)
        body = [f"    v{m.id} = {self.expr(m)}" for m in g.members[1:]]
        loads = [ln for k in range(len(self.ext)) for ln in T.load(k, "lin", "mask", "    ")]
        body = loads + body + self._stores("    ", ("full",), "lin", "mask")
        precision = "tf32x3" if a_val.dtype == torch.float32 else None
        upcast = a_val.dtype == torch.bfloat16
        kernel = T.matmul_kernel(f"{self.name}_kernel", self.doc(), len(self.ext), len(g.outputs),
                                 len(self.scalars), precision, body, f"v{mmv.id}", upcast)
        pa, pb = self._pname(a_val), self._pname(b_val)
        py = [f"ga, gb, batch, M, N, K, shape, sa, sb = _ks_mm_geometry({pa}, {pb}, {mmv.params['linear']})"]
        py += self._allocs({"full": "shape"})
        py += [f"t{k}, m{k}, i{k}, s{k} = _ks_bc({self._pname(a)}, shape)" for k, (a, _) in enumerate(self.ext)]
        kmax = 32 if a_val.dtype == torch.float32 else 64
        py += ["block_m = min(max(_ks_np2(M), 16), 128)", "block_n = min(max(_ks_np2(N), 16), 128)",
               f"block_k = min(max(_ks_np2(K), 16), {kmax})", "if batch * M * N > 0:",
               "    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n), batch)"]
        sizes = ["ga", "gb", "M", "N", "K", "sa[0]", "sa[1]", "sa[2]", "sb[0]", "sb[1]", "sb[2]"]
        consts = ["BLOCK_M=block_m", "BLOCK_N=block_n", "BLOCK_K=block_k", "GROUP_M=8"]
        if upcast:  # Triton's interpreter (CPU tensors) gets bf16 tl.dot wrong: upcast the tiles there
            consts.append('UPCAST=ga.device.type == "cpu"')
        py += ["    " + ln for ln in self._launch("grid", sizes, consts, "8 if block_m * block_n >= 128 * 128 else 4",
                                                   "3")]
        return kernel, self._launcher(py)

    def _reduction(self) -> tuple[str, str]:
        g = self.g
        members = g.members
        level: dict[_Val, int] = {}
        for m in members:
            inner = [level[a] for a in _flat(m.args) if a in level]
            level[m] = (max(inner, default=0) + 1) if m.kind == "red" else max(inner, default=0)
        code: dict[_Val, str] = {}
        red_in: dict[_Val, str] = {}
        for m in members:  # operand names are assigned in member order: stable kernel signatures
            if m.kind == "red":
                red_in[m] = self.operand(m.args[0], "full")
            else:
                code[m] = self.expr(m)

        def finish(m: _Val, acc: str) -> str:
            if m.op in ("max", "min"):
                return f"tl.{m.op}({acc}, axis=0, keep_dims=True)"
            total = f"tl.sum({acc}, axis=0, keep_dims=True)"
            if m.op == "mean":
                return f"{total} / R"
            if m.op == "sumdiv":
                return f"{total} / (R - {T.literal(m.params['correction'])})"
            return total

        def masked(m: _Val) -> str:
            return f"tl.where(fmask, {red_in[m]}, {_RED_INIT.get(m.op, '0.0')})"

        def closure(targets: list[_Val]) -> list[_Val]:
            need: set[_Val] = set()
            stack = list(targets)
            while stack:
                v = stack.pop()
                if v in need or self.group_of.get(v) is not g or g.space[v] != "full" or v.kind == "red":
                    continue
                need.add(v)
                stack += _flat(v.args)
            return [m for m in members if m in need]

        def loads_for(lines: list[str], pad: str) -> list[str]:
            return [ln for k in self.ext_used(lines) for ln in T.load(k, "fl", "fmask", pad)]

        reduced_loads = [ln for k, (_, sp) in enumerate(self.ext) if sp != "full"
                         for ln in T.load(k, "rl", "rmask", "    ")]
        # one pass: everything in registers
        pad = " " * 8
        single = [f"{pad}rr = tl.arange(0, BLOCK_R)"] + T.full_index("rr", pad)
        body = []
        for m in members:
            if m.kind == "red":
                body.append(f"{pad}v{m.id} = {finish(m, masked(m))}")
            else:
                body.append(f"{pad}v{m.id} = {code[m]}")
        body += self._stores(pad, ("full",), "fl", "fmask") + self._stores(pad, ("keep", "nokeep"), "rl", "rmask")
        single += loads_for(body, pad) + body
        # looped: one pass per reduction level, then a write pass
        looped: list[str] = []
        passes = max(level[m] for m in members if m.kind == "red")
        emitted: set[_Val] = set()

        def reduced_members(upto: int) -> list[str]:
            out = []
            for m in members:
                if m.kind != "red" and g.space[m] != "full" and m not in emitted and level[m] <= upto:
                    emitted.add(m)
                    out.append(f"{pad}v{m.id} = {code[m]}")
            return out

        looped += reduced_members(0)
        inner = " " * 12
        for p in range(passes):
            reds = [m for m in members if m.kind == "red" and level[m] == p + 1]
            for m in reds:
                init = f"tl.full([BLOCK_R, BLOCK_I], {_RED_INIT[m.op]}, tl.float32)" if m.op in _RED_INIT else \
                    "tl.zeros([BLOCK_R, BLOCK_I], dtype=tl.float32)"
                looped.append(f"{pad}acc{m.id} = {init}")
            looped.append(f"{pad}for r0 in range(0, R, BLOCK_R):")
            looped += [f"{inner}rr = r0 + tl.arange(0, BLOCK_R)"] + T.full_index("rr", inner)
            step = [f"{inner}v{m.id} = {code[m]}" for m in closure([a for r in reds for a in _flat(r.args)])]
            for m in reds:
                if m.op in _RED_INIT:
                    step.append(f"{inner}acc{m.id} = tl.{'maximum' if m.op == 'max' else 'minimum'}("
                                f"acc{m.id}, {masked(m)})")
                else:
                    step.append(f"{inner}acc{m.id} += {masked(m)}")
            looped += loads_for(step, inner) + step
            looped += [f"{pad}v{m.id} = {finish(m, f'acc{m.id}')}" for m in reds]
            looped += reduced_members(p + 1)
        full_out = [o for o in g.outputs if g.space[o] == "full"]
        if full_out:
            looped.append(f"{pad}for r0 in range(0, R, BLOCK_R):")
            looped += [f"{inner}rr = r0 + tl.arange(0, BLOCK_R)"] + T.full_index("rr", inner)
            step = [f"{inner}v{m.id} = {code[m]}" for m in closure(full_out)]
            step += self._stores(inner, ("full",), "fl", "fmask")
            looped += loads_for(step, inner) + step
        looped += self._stores(pad, ("keep", "nokeep"), "rl", "rmask")
        kernel = T.reduction_kernel(f"{self.name}_kernel", self.doc(), len(self.ext), len(g.outputs),
                                    len(self.scalars), reduced_loads, single, looped)
        full_ext = [a for a, sp in self.ext if sp == "full"]
        if not full_ext:
            raise SeedUnsupported("internal: a reduction kernel without a full-size operand")
        shapes = ", ".join(f"{self._pname(a)}.shape" for a in dict.fromkeys(full_ext))
        py = [f"S = _ks_bshape({shapes})", f"ra, rb = _ks_rdims({g.spec!r}, len(S))",
              "outer, R, I = _ks_prod(S[:ra]), _ks_prod(S[ra:rb]), _ks_prod(S[rb:])",
              "Sk = S[:ra] + (1,) * (rb - ra) + S[rb:]", "Sn = S[:ra] + S[rb:]"]
        py += self._allocs({"full": "S", "keep": "Sk", "nokeep": "Sn"})
        py += [f"t{k}, m{k}, i{k}, s{k} = _ks_bc({self._pname(a)}, {dict(full='S', keep='Sk', nokeep='Sn')[sp]})"
               for k, (a, sp) in enumerate(self.ext)]
        py += ["block_i = min(_ks_np2(I), 64)", "block_r = _ks_np2(R)", "single = block_r * block_i <= 8192",
               "if not single:", "    block_r = max(4096 // block_i, 1)", "n_ib = triton.cdiv(I, block_i)",
               "if outer * I > 0:"]
        py += ["    " + ln for ln in self._launch(
            "(outer * n_ib,)", ["R", "I", "n_ib"], ["BLOCK_R=block_r", "BLOCK_I=block_i", "SINGLE=single"],
            "4 if block_r * block_i <= 2048 else 8")]
        return kernel, self._launcher(py)


TEMPLATES = {"ew": T.ELEMENTWISE, "red": T.REDUCTION, "mm": T.MATMUL}


def _tokens(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))


# ------------------------------------------------------------------------------------------ the whole file


def _live(outputs: Any) -> set[_Val]:
    live: set[_Val] = set()
    stack = _flat(outputs)
    while stack:
        v = stack.pop()
        if v in live:
            continue
        live.add(v)
        stack += _flat(v.args)
    return live


def _order(groups: list[_Group], group_of: dict[_Val, _Group], glue: list[_Val]) -> list[Any]:
    """Kernels and glue statements in an order that respects every dependency."""
    units: list[Any] = list(groups) + glue
    deps: dict[int, set[int]] = {}
    key = {id(u): (min(m.id for m in u.members) if isinstance(u, _Group) else u.id) for u in units}
    unit_of: dict[_Val, Any] = {v: v for v in glue}
    unit_of.update(group_of)
    for u in units:
        args = [a for m in (u.members if isinstance(u, _Group) else [u]) for a in _flat(m.args)]
        deps[id(u)] = {id(unit_of[a]) for a in args if a in unit_of and unit_of[a] is not u}
    done: set[int] = set()
    order = []
    while len(order) < len(units):
        ready = [u for u in units if id(u) not in done and deps[id(u)] <= done]
        if not ready:
            raise SeedUnsupported("internal: cyclic kernel dependencies")
        u = min(ready, key=lambda x: key[id(x)])
        done.add(id(u))
        order.append(u)
    return order


def _forward_signature(model_cls: type) -> tuple[str, list[inspect.Parameter]]:
    sig = inspect.signature(model_cls.forward)
    params = list(sig.parameters.values())[1:]  # drop self
    parts = []
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise SeedUnsupported("Model.forward with *args / **kwargs has no template")
        if p.default is p.empty:
            parts.append(p.name)
        else:
            try:
                default = _arg(p.default, str)
            except SeedUnsupported:
                raise SeedUnsupported(f"Model.forward default {p.name}={p.default!r} cannot be written") from None
            parts.append(f"{p.name}={default}")
    return ", ".join(["self"] + parts), params


def _free_names(tree: ast.AST) -> set[str]:
    """Names read in `tree` that nothing in it binds (parameters, assignments, loop targets, imports)."""
    bound: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            bound.add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not tree:
            bound.add(n.name)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def _class_source(task_source: str, forward: str, doc: str) -> tuple[str, list[str], list[str]]:
    """ModelNew: the reference's Model class (same __init__ code) with `forward` replaced; plus the task's
    imports and the top-level definitions the class needs."""
    tree = pyast.parse(task_source)
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if cls is None:
        raise SeedUnsupported("the task defines no class Model")
    cls = copy.deepcopy(cls)
    cls.name = "ModelNew"
    body = [n for n in cls.body if not (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                                        and n.name == "forward")]
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    cls.body = [ast.Expr(ast.Constant(doc))] + body

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.Name:
            if node.id == "Model":
                node.id = "ModelNew"
            return node

    Rename().visit(cls)
    text = ast.unparse(ast.fix_missing_locations(cls)) + "\n\n" + textwrap.indent(forward, "    ")
    imports, defs = [], {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(ast.unparse(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name != "Model":
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        defs.setdefault(n.id, node)
    needed: list[ast.AST] = []
    stack = sorted(_free_names(cls))
    seen: set[str] = set()
    while stack:
        name = stack.pop()
        if name in seen or name not in defs:
            continue
        seen.add(name)
        if defs[name] not in needed:
            needed.append(defs[name])
        stack += sorted(_free_names(defs[name]))
    order = {id(n): i for i, n in enumerate(tree.body)}
    deps = [ast.unparse(n) for n in sorted(needed, key=lambda n: order[id(n)])]
    return text, imports, deps


def _leaves(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return [x for o in obj for x in _leaves(o)]
    if isinstance(obj, dict):
        return [x for o in obj.values() for x in _leaves(o)]
    if isinstance(obj, slice):
        return _leaves([obj.start, obj.stop, obj.step])
    return [obj]


def _replace_leaves(obj: Any, new: dict[int, Any], counter: list[int]) -> Any:
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return type(obj)(_replace_leaves(o, new, counter) for o in obj)
    if isinstance(obj, dict):
        return {k: _replace_leaves(o, new, counter) for k, o in obj.items()}
    if isinstance(obj, slice):
        a, b, c = _replace_leaves([obj.start, obj.stop, obj.step], new, counter)
        return slice(a, b, c)
    i = counter[0]
    counter[0] += 1
    return new.get(i, obj)


def _attribute_refs(gm: fx.GraphModule, model: torch.nn.Module, retrace: Any) -> None:
    """Mark the floats in `gm`'s node arguments that are model attributes read in forward (`x * self.scale`),
    so the seed reads them from `self` at run time instead of baking the traced values: retrace with every
    float attribute set to a distinct sentinel and compare. Any doubt (the graph changes, tracing fails)
    leaves the values baked."""
    attrs = []
    for mpath, mod in model.named_modules():
        for name, value in vars(mod).items():
            if type(value) is float and not name.startswith("_"):
                attrs.append((mod, name, f"{mpath}.{name}" if mpath else name, value))
    if not attrs:
        return
    sentinels = {1.000123456789 + i * 2.0 ** -20: a for i, a in enumerate(attrs)}
    try:
        for s, (mod, name, _, _) in sentinels.items():
            setattr(mod, name, s)
        other = retrace()
    except Exception:
        return
    finally:
        for mod, name, _, value in attrs:
            setattr(mod, name, value)
    nodes, twins = list(gm.graph.nodes), list(other.graph.nodes)
    if len(nodes) != len(twins) or any(a.op != b.op or a.target != b.target for a, b in zip(nodes, twins)):
        return
    for a, b in zip(nodes, twins):
        if a.op not in ("call_function", "call_method"):
            continue
        ours, theirs = _leaves((a.args, a.kwargs)), _leaves((b.args, b.kwargs))
        if len(ours) != len(theirs):
            return
        refs = {}
        for i, (x, y) in enumerate(zip(ours, theirs)):
            if type(y) is float and y in sentinels and type(x) is float and x == sentinels[y][3]:
                refs[i] = _AttrRef(sentinels[y][2], x)
        if refs:
            a.args, a.kwargs = _replace_leaves((a.args, a.kwargs), refs, [0])


class _Recorder(fx.Interpreter):
    """Runs the traced graph once and keeps every node's result (meta tensors: shapes only) in `meta["val"]`;
    `failed` is the node that raised, for the message."""

    failed: fx.Node | None = None

    def run_node(self, n: fx.Node) -> Any:
        try:
            out = super().run_node(n)
        except Exception:
            self.failed = n
            raise
        n.meta["val"] = out
        return out


class _LineTracer(fx.Tracer):
    """fx's tracer, noting in each node the task file's line that made it (the innermost frame of that file),
    so messages name it. fx's own `record_stack_traces` costs ~1.5 s of imports on its first use."""

    def __init__(self, filename: str):
        super().__init__()
        self.filename = filename

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        if frame is not None:
            node.meta["task_line"] = frame.f_lineno
        return node


def _symbolic_trace(model: torch.nn.Module, concrete: dict | None, filename: str) -> fx.GraphModule:
    """`fx.symbolic_trace`, with each node's line of the task file (`_LineTracer`)."""
    tracer = _LineTracer(filename)
    graph = tracer.trace(model, concrete_args=concrete)
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


def _state_assignment(model: torch.nn.Module, task_source: str, filename: str) -> str | None:
    """A forward that assigns `self.NAME = ...` keeps state between calls: tracing leaves a Proxy in that
    attribute. The refusal names it and the line of its first assignment in a `forward`."""
    for mpath, mod in model.named_modules():
        for name, value in vars(mod).items():
            if not isinstance(value, fx.Proxy):
                continue
            line = None
            try:
                for fn in ast.walk(pyast.parse(task_source)):
                    if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == "forward":
                        line = line or next((n.lineno for n in ast.walk(fn) if isinstance(n, ast.Attribute)
                                             and isinstance(n.ctx, ast.Store) and n.attr == name
                                             and isinstance(n.value, ast.Name) and n.value.id == "self"), None)
            except SyntaxError:
                pass
            line = line or _node_line(value.node, filename)
            attr = f"{mpath}.{name}" if mpath else name
            return (f"{_at(filename, line)}Model.forward assigns self.{attr} (state kept from one call to the next): "
                    "no template; a forward that only reads its attributes can be translated")
    return None


def _refuse_unknown(gm: fx.GraphModule, model: torch.nn.Module, filename: str) -> None:
    """Refuse the first operator no template covers, from the traced graph alone: before any shape is
    propagated (which may run the model on real CPU tensors), so the refusal takes milliseconds."""
    for node in gm.graph.nodes:
        if not _known(node, gm):
            line = _node_line(node, filename)
            where = f"{filename}:{line}: " if line else ""
            raise SeedUnsupported(f"{where}{_describe(node, gm)} has no template")


def _trace(module: Any, init_inputs: list, example_inputs: list, real_inputs: Any = None,
           filename: str = "<task>", task_source: str = "") -> tuple[fx.GraphModule, torch.nn.Module]:
    """Trace `Model(*init_inputs)`, refuse what no template covers, and record every node's value;
    `real_inputs()` gives CPU inputs for the fallback when the model cannot run on the meta device."""
    model_cls = getattr(module, "Model", None)
    if model_cls is None:
        raise SeedUnsupported(f"{filename}: the task defines no class Model")
    _, params = _forward_signature(model_cls)
    if len(example_inputs) > len(params):
        raise SeedUnsupported(f"{filename}: get_inputs() gives {len(example_inputs)} values for {len(params)} "
                              "forward arguments")
    run_args, concrete = [], {}
    for i, p in enumerate(params):
        if i < len(example_inputs):
            a = example_inputs[i]
            if not isinstance(a, torch.Tensor):
                concrete[p.name] = a  # a non-tensor input is specialised to its value
        elif p.default is not p.empty:
            a = concrete[p.name] = p.default
        else:
            raise SeedUnsupported(f"{filename}: get_inputs() gives no value for forward argument {p.name}")
        run_args.append(a)

    def build(meta: bool) -> tuple[fx.GraphModule, torch.nn.Module]:
        try:
            if meta:
                with torch.device("meta"):
                    model = model_cls(*init_inputs)
            else:
                model = model_cls(*init_inputs)
        except Exception as exc:
            if meta:
                raise
            raise SeedUnsupported(f"{_at(filename, _exc_line(exc, filename))}Model(*get_init_inputs()) fails "
                                  f"({_first_line(exc)})") from None
        try:
            gm = _symbolic_trace(model, concrete or None, filename)
        except Exception as exc:
            why = next((w for key, w in _TRACE_WHY if key in str(exc)), "torch.fx cannot trace Model.forward")
            raise SeedUnsupported(f"{_at(filename, _exc_line(exc, filename))}{why}: no template "
                                  f"({_first_line(exc)})") from None
        state = _state_assignment(model, task_source, filename)
        if state:
            raise SeedUnsupported(state)
        _refuse_unknown(gm, model, filename)
        for node in list(gm.graph.nodes):  # the guards fx adds for specialised arguments
            if node.op == "call_function" and getattr(node.target, "__name__", "") in _SKIP:
                gm.graph.erase_node(node)
        gm.graph.eliminate_dead_code()
        return gm, model

    def retrace() -> fx.GraphModule:
        return fx.symbolic_trace(model, concrete_args=concrete or None)

    meta_failure = ""
    try:  # on the meta device: no memory, no arithmetic, whatever the sizes
        gm, model = build(meta=True)
        _Recorder(gm).run(*[torch.empty_like(a, device="meta") if isinstance(a, torch.Tensor) else a
                            for a in run_args])
        _attribute_refs(gm, model, retrace)
        return gm, model
    except SeedUnsupported:
        raise
    except Exception as exc:
        meta_failure = _first_line(exc)
    if any(isinstance(a, torch.Tensor) and a.device.type == "meta" for a in run_args):
        if real_inputs is None:
            raise SeedUnsupported(f"{filename}: Model cannot run on the meta device ({meta_failure}) and no real "
                                  "example inputs were given")
        real = list(real_inputs())
        run_args = [real[i] if i < len(real) else a for i, a in enumerate(run_args)]
    gm, model = build(meta=False)  # an __init__ or an op that needs real data: real CPU tensors instead
    recorder = _Recorder(gm)
    try:
        with torch.no_grad():
            recorder.run(*run_args)
        _attribute_refs(gm, model, retrace)
    except SeedUnsupported:
        raise
    except Exception as exc:
        node = recorder.failed
        what = f"{_describe(node, gm)}: " if node is not None and node.op.startswith("call") else ""
        raise SeedUnsupported(f"{_at(filename, _node_line(node, filename))}{what}Model.forward fails on the "
                              f"example inputs ({_first_line(exc)})") from None
    return gm, model


def _task_inputs(module: Any) -> list:
    """The task's `get_inputs()`, created on the meta device when possible (only shapes and dtypes matter)."""
    try:
        with torch.device("meta"):
            return list(module.get_inputs())
    except Exception:
        return list(module.get_inputs())


def generate_seed(task_source: str, init_inputs: Any = None, example_inputs: list | None = None, *,
                  filename: str = "<task>") -> SeedResult:
    """Translate the task's `Model` into a Triton candidate (see the module docstring).

    `init_inputs` / `example_inputs` default to the task's own `get_init_inputs()` / `get_inputs()`; a string
    in `init_inputs`' place is taken as the task's file name (the form `generate_seed(source, path)`).
    Raises `SeedUnsupported` naming the first operator no template covers."""
    if isinstance(init_inputs, (str, Path)):
        filename, init_inputs = str(init_inputs), None
    name = f"kernelsmith_seed_task_{next(_counter)}"
    try:
        check_imports(pyast.parse(task_source, filename=filename), filename)
    except SyntaxError as exc:
        raise SeedUnsupported(f"{filename}:{exc.lineno}: syntax error in the task: {exc.msg}") from None
    except TaskMissingModule as exc:
        raise SeedUnsupported(str(exc)) from None
    try:
        try:
            module = load_module(task_source, filename, name)
        except Exception as exc:
            raise SeedUnsupported(f"{_at(filename, _exc_line(exc, filename))}the task does not run "
                                  f"({_first_line(exc)})") from None
        with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
            torch.manual_seed(0)
            try:
                if init_inputs is None:
                    init_inputs = list(module.get_init_inputs())
                real = None
                if example_inputs is None:
                    example_inputs = _task_inputs(module)
                    real = module.get_inputs
            except Exception as exc:
                raise SeedUnsupported(f"{_at(filename, _exc_line(exc, filename))}get_inputs() or "
                                      f"get_init_inputs() fails ({_first_line(exc)})") from None
            gm, model = _trace(module, list(init_inputs), list(example_inputs), real, filename, task_source)
        signature, _ = _forward_signature(module.Model)
    finally:
        sys.modules.pop(name, None)
    low = _Lowerer(gm, model, filename)
    low.run()
    return _emit(task_source, low, signature, filename)


def _emit(task_source: str, low: _Lowerer, signature: str, filename: str = "<task>") -> SeedResult:
    live = _live(low.outputs)
    fuser = _Fuser(low.vals)
    groups = fuser.run(live)
    if not groups:
        raise SeedUnsupported(f"{filename}: Model.forward computes nothing a kernel could do (only views or inputs)")
    group_of = fuser.group_of
    users: dict[_Val, set[Any]] = {}
    for v in low.vals:
        if v in live:
            for a in _flat(v.args):
                users.setdefault(a, set()).add(group_of.get(v, v))
    outs = set(_flat(low.outputs))
    for g in groups:
        g.outputs = [m for m in g.members if m in outs or any(u is not g for u in users.get(m, ()))]
    glue = [v for v in low.vals if v in live and v.kind == "glue"]
    order = _order(groups, group_of, glue)

    inputs = {v: v.params["name"] for v in low.vals if v.kind == "input"}
    prefix = "val" if any(n.startswith("v") and n[1:].isdigit() for n in inputs.values()) else "v"

    taken = set(inputs.values())
    for v in low.vals:
        if v.kind == "param" or (v.kind == "glue" and v.op == "attr"):
            base = re.sub(r"\W", "_", v.params["path"])
            base = base if base.isidentifier() and not base.startswith("_") else f"p_{base}"
            while base in taken:
                base += "_"
            taken.add(base)
            inputs[v] = base

    def nm(v: _Val) -> str:
        return inputs.get(v) or f"{prefix}{v.id}"

    kernels, launchers, patterns, described = [], [], [], []
    body = [f"{nm(v)} = _ks_attr(self, {v.params['path']!r})" for v in low.vals if v.kind == "param" and v in live]
    for k, unit in enumerate(u for u in order if isinstance(u, _Group)):
        unit.name = f"ks_{TEMPLATES[unit.kind].split('_')[0]}_{k}"
    for unit in order:
        if isinstance(unit, _Group):
            w = _KernelWriter(unit, group_of, unit.name)
            kernel, launcher = w.write()
            kernels.append(kernel)
            launchers.append(launcher)
            patterns.append(TEMPLATES[unit.kind])
            described.append(f"{unit.name}: {w.doc()}")
            outs_text = ", ".join(nm(o) for o in unit.outputs)
            call = f"{unit.name}({', '.join(nm(a) for a in w.args)})"
            body.append(f"{outs_text} = {call}")
        else:
            body.append(f"{nm(unit)} = {unit.render(nm)}")

    def ret(o: Any) -> str:
        if isinstance(o, _Val):
            return f"{nm(o)}.clone()" if o.kind in ("input", "param") else nm(o)
        if isinstance(o, (list, tuple)):
            inner = ", ".join(ret(x) for x in o)
            return f"[{inner}]" if isinstance(o, list) else (f"({inner},)" if len(o) == 1 else f"({inner})")
        return _arg(o, nm)

    body.append(f"return {ret(low.outputs)}")
    forward = f"def forward({signature}):\n" + textwrap.indent("\n".join(body), "    ") + "\n"
    doc = (f"Seed translated from the reference by kernelsmith (templates: {', '.join(dict.fromkeys(patterns))}): "
           "parameters are created by the reference's own __init__ code.")
    cls_text, imports, deps = _class_source(task_source, forward, doc)
    header = [ln for ln in dict.fromkeys(T.IMPORTS + imports)]
    future = [ln for ln in header if ln.startswith("from __future__")]
    header = future + [ln for ln in header if ln not in future]
    parts = [
        '"""Seed candidate: the reference translated to Triton by kernelsmith\'s template seed (no model).\n\n'
        + "\n".join(f"{d}" for d in described) + '\n"""',
        "\n".join(header),
    ]
    if deps:
        parts.append("\n\n".join(deps))
    parts.append("# EVOLVE-BLOCK-START\n" + T.JIT_HELPERS.strip() + "\n\n\n" + "\n\n\n".join(k.strip() for k in kernels)
                 + "\n\n\n" + T.PY_HELPERS.strip() + "\n\n\n" + "\n\n\n".join(ln.strip() for ln in launchers)
                 + "\n\n\n" + cls_text.rstrip() + "\n# EVOLVE-BLOCK-END")
    source = "\n\n\n".join(parts) + "\n"
    try:
        compile(source, "<seed>", "exec")
    except SyntaxError as exc:  # a bug here, never the task's fault
        raise RuntimeError(f"seed generator wrote invalid Python: {exc}\n{source}") from exc
    return SeedResult(source=source, patterns=patterns, kernels=described)


def seed_for_task(path: str | Path, device: str = "cpu", overrides: dict | None = None) -> SeedResult:
    """The seed for a task file, with its sizes as the referee would use them on `device`."""
    task = Task.load(path, overrides=overrides, device=device)
    return generate_seed(task.source, filename=str(path))

