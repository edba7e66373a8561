"""The sandboxed side of `kernelsmith extract`: `python -m kernelsmith.extract.worker DIR`.

Reads DIR/job.json (the model's source with overrides applied, device, top N), and writes DIR/result.json. Runs
only inside a referee sandbox (`Child.start`): this is where the model's code executes.

1. Build `Model(*get_init_inputs())` and `get_inputs()` the way the referee builds a task (same seed before
   each), run it once; a failure here is the model's own ("fault": "model").
2. Trace it with torch.fx (stack traces on, so every node knows its line in the model file) and check the graph
   reproduces the model's output. What fx cannot trace (data-dependent control flow, ...) falls back to forward
   hooks on torch.nn's own modules: each call is then a subgraph.
3. Time it: the whole model (median of timed runs, and one run under torch.profiler for the top operators) and
   every fx node (an interpreter that synchronises around each node) — a group's share is its nodes' time over
   the larger of the model's time and the nodes' sum, so shares never add up past 1.
4. Group the nodes into fusable subgraphs: a matmul/conv with the elementwise ops that follow it (and a batch
   norm after a conv), q@kᵀ → scale/mask → softmax → @v as one attention block, a norm, a softmax, a reduction,
   each with its elementwise epilogue. Views, sizes and elementwise ops on inputs or parameters are "free": each
   group that needs them recomputes them, so every group is a closed function of tensors.
5. For the top N groups by share, build a spec (`spec.py`), render it, load the rendered task, copy the model's
   real parameters into it, run it on the intermediates captured from the model's run and compare with the
   model's own intermediates (the referee's tolerances); then build it standalone from its own
   `get_init_inputs`/`get_inputs` and check it runs with the recorded output shapes. A group that cannot be made
   standalone keeps its share and a reason.
"""

from __future__ import annotations

import functools
import json
import keyword
import math
import operator
import os
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.fx import Node

from kernelsmith.extract import spec as S

SEED = 42
RESULT = "result.json"
TIME_BUDGET_S = 20.0  # for the timed runs of the model and of its nodes, together
MAX_REPS, MIN_REPS = 25, 3
MODULE_NAME = "kernelsmith_extract_model"

GLUE = {"view", "reshape", "permute", "transpose", "contiguous", "size", "flatten", "unflatten", "squeeze",
        "unsqueeze", "expand", "expand_as", "split", "chunk", "getitem", "t", "narrow", "select", "unbind", "dim",
        "getattr", "view_as", "reshape_as", "movedim", "swapaxes", "swapdims", "split_with_sizes", "numel",
        "detach", "Flatten", "Unflatten", "Identity", "type", "requires_grad_"}
EW = {"add", "sub", "mul", "truediv", "div", "floordiv", "neg", "pow", "relu", "gelu", "silu", "sigmoid", "tanh",
      "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "abs", "clamp", "clip", "clamp_min", "clamp_max", "where",
      "masked_fill", "dropout", "leaky_relu", "elu", "selu", "celu", "hardswish", "hardsigmoid", "hardtanh",
      "relu6", "softplus", "softsign", "mish", "erf", "float", "half", "bfloat16", "double", "to", "type_as",
      "maximum", "minimum", "sin", "cos", "reciprocal", "sign", "floor", "ceil", "round", "logical_not",
      "logical_and", "logical_or", "eq", "ne", "lt", "gt", "le", "ge", "and_", "or_", "xor", "invert", "mod",
      "tril", "triu", "lerp", "addcmul", "addcdiv", "square", "glu", "logsigmoid", "tanhshrink", "threshold",
      "prelu", "rrelu", "silu_", "relu_", "add_", "mul_", "sub_", "div_", "masked_fill_", "clamp_", "sigmoid_",
      "tanh_", "clone", "ReLU", "GELU", "SiLU", "Sigmoid", "Tanh", "LeakyReLU", "ELU", "SELU", "CELU",
      "Hardswish", "Hardsigmoid", "Hardtanh", "ReLU6", "Mish", "Softplus", "Softsign", "PReLU", "Dropout",
      "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "GLU", "LogSigmoid", "Threshold", "Tanhshrink",
      "iadd", "imul", "isub", "itruediv", "pos", "scale", "fill_", "zero_", "nan_to_num", "float_power",
      "true_divide", "multiply", "subtract", "negative", "bitwise_not"}
CATEGORY = {
    "matmul": {"matmul", "mm", "bmm", "linear", "addmm", "baddbmm", "einsum", "bilinear", "addmv", "mv", "Linear",
               "Bilinear", "LazyLinear"},
    "conv": {"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "Conv1d",
             "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"},
    "norm": {"layer_norm", "batch_norm", "group_norm", "instance_norm", "rms_norm", "normalize",
             "local_response_norm", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm",
             "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "LocalResponseNorm", "SyncBatchNorm"},
    "softmax": {"softmax", "log_softmax", "softmin", "Softmax", "LogSoftmax", "Softmin", "Softmax2d"},
    "reduction": {"sum", "mean", "max", "min", "amax", "amin", "prod", "var", "std", "logsumexp", "norm", "argmax",
                  "argmin", "cumsum", "cumprod", "all", "any", "var_mean", "std_mean"},
    "pool": {"max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
             "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "adaptive_max_pool1d",
             "adaptive_max_pool2d", "adaptive_max_pool3d", "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d",
             "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
             "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d"},
    "attention": {"scaled_dot_product_attention", "MultiheadAttention"},
}
SHORT = {"Linear": "linear", "LazyLinear": "linear", "matmul": "matmul", "bmm": "bmm", "layer_norm": "layernorm",
         "LayerNorm": "layernorm", "batch_norm": "batchnorm", "group_norm": "groupnorm", "GroupNorm": "groupnorm",
         "scaled_dot_product_attention": "sdpa", "MultiheadAttention": "mha", "truediv": "div", "iadd": "add"}
# Tensors made from nothing but sizes (random states, zeros): a subgraph takes them as inputs, like the model's own
SOURCES = {"randn", "rand", "randint", "randperm", "normal", "zeros", "ones", "empty", "full", "arange", "linspace",
           "eye", "zeros_like", "ones_like", "randn_like", "rand_like", "empty_like", "full_like", "new_zeros",
           "new_ones", "new_empty", "new_full"}
CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"}


class ModelFailure(Exception):
    """The model's own code failed (import, constructor, inputs, forward): the user's problem, said in one line."""


class Unsupported(Exception):
    """A subgraph that cannot be made into a standalone task; the message is the reason recorded for it."""


def _one_line(exc: BaseException, filename: str) -> str:
    """`line N: Type: message`, N the innermost frame in the model file."""
    line = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == filename:
            line = f"line {frame.lineno}: "
    text = " ".join(str(exc).split())[:400]
    return f"{line}{type(exc).__name__}{': ' + text if text else ''}"


# ------------------------------------------------------------------------------------------ values
def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def encode(v: Any) -> Any:
    """A Python value as the spec encodes it; `Unsupported` for what a task file cannot spell (a device, ...)."""
    import torch

    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, (tuple, torch.Size)):
        return {"tuple": [encode(x) for x in v]}
    if isinstance(v, list):
        return [encode(x) for x in v]
    if isinstance(v, torch.dtype) and _dtype_name(v) in S.DTYPES:
        return {"dtype": _dtype_name(v)}
    if isinstance(v, slice):
        return {"slice": [encode(v.start), encode(v.stop), encode(v.step)]}
    if v is Ellipsis:
        return {"ellipsis": True}
    if isinstance(v, torch.memory_format) and _dtype_name(v) in S.MEMORY_FORMATS:
        return {"memory_format": _dtype_name(v)}
    raise Unsupported(f"uses a {type(v).__name__} value ({str(v)[:60]}), which a task file cannot spell")


def describe(v: Any, bounds: bool = False) -> dict[str, Any]:
    """What a node produced: a tensor's shape and dtype (and value range), a tuple of them, or a literal."""
    import torch

    if isinstance(v, torch.Tensor):
        d: dict[str, Any] = {"tensor": True, "shape": list(v.shape), "dtype": _dtype_name(v.dtype)}
        if bounds and v.numel() and not v.is_complex():
            d["low"], d["high"] = float(v.min()), float(v.max())
        return d
    if isinstance(v, (tuple, list)) and v and all(isinstance(x, (torch.Tensor, tuple, list)) for x in v):
        return {"tuple": [describe(x) for x in v]}
    try:
        return {"value": encode(v)}
    except Unsupported:
        return {"other": type(v).__name__}


def _clone(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, (tuple, list)):
        return type(v)(_clone(x) for x in v)
    return v


def _flat_tensors(v: Any, path: tuple[int, ...] = ()) -> list[tuple[tuple[int, ...], Any]]:
    import torch

    if isinstance(v, torch.Tensor):
        return [(path, v)]
    if isinstance(v, (tuple, list)):
        return [x for i, e in enumerate(v) for x in _flat_tensors(e, (*path, i))]
    return []


# ------------------------------------------------------------------------------------------ running
def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn: Any, reps: int, device: str) -> float:
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        fn()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _seed_all(seed: int) -> None:
    """As the referee seeds before building a task's model (torch, numpy, random)."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def _build(module: Any, device: str) -> tuple[Any, list[Any]]:
    """Model and inputs as the referee builds a task's (same seeds), or `ModelFailure` saying which step."""
    from kernelsmith.referee.worker import init_inputs, make_inputs

    filename = module.__file__
    try:
        init = init_inputs(module, SEED, device)
    except BaseException as exc:  # noqa: BLE001 - the model's code: any failure is reported, in one line
        raise ModelFailure(f"get_init_inputs() raised: {_one_line(exc, filename)}") from None
    _seed_all(SEED)
    try:
        model = module.Model(*init)
        model = model.to(device) if hasattr(model, "to") else model
    except BaseException as exc:  # noqa: BLE001
        raise ModelFailure(f"Model(*get_init_inputs()) raised: {_one_line(exc, filename)}") from None
    try:
        inputs = make_inputs(module, SEED, device)
    except BaseException as exc:  # noqa: BLE001
        raise ModelFailure(f"get_inputs() raised: {_one_line(exc, filename)}") from None
    return model, inputs


def _attr(root: Any, target: str) -> Any:
    return functools.reduce(getattr, target.split("."), root)


_REVERSE: dict[int, tuple[str, str]] = {}


def function_name(fn: Any) -> tuple[str, str]:
    """(namespace, name) under which the rendered task calls `fn`: F, torch, operator, math, or builtins.getattr."""
    import torch
    import torch.nn.functional as F

    if not _REVERSE:
        for ns, mod in (("F", F), ("torch", torch), ("operator", operator), ("math", math)):
            for name in dir(mod):
                if not name.startswith("_"):
                    obj = getattr(mod, name, None)
                    if callable(obj):
                        _REVERSE.setdefault(id(obj), (ns, name))
        _REVERSE[id(getattr)] = ("builtins", "getattr")
    found = _REVERSE.get(id(fn))
    if found is None:
        raise Unsupported(f"calls {getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', fn)}, which is not a "
                          "public torch, torch.nn.functional, operator or math function")
    return found


# ------------------------------------------------------------------------------------------ fx tracing
def fx_trace(model: Any, n_inputs: int) -> Any:
    """The model's fx graph; `forward` parameters that `get_inputs()` leaves out keep their defaults as
    constants (`def forward(self, x, h0=None)`: the `if h0 is None` branch is the one that runs)."""
    import inspect

    import torch.fx as fx

    tracer = fx.Tracer()
    tracer.record_stack_traces = True
    tracer.proxy_buffer_attributes = True  # `self.mask[:, :, :T, :T]` with T traced (minGPT)
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    concrete = {p.name: p.default for p in params[n_inputs:] if p.default is not p.empty}
    graph = tracer.trace(model, concrete_args=concrete or None)
    return fx.GraphModule(tracer.root, graph)


def _interpreter(gm: Any, device: str, meta: dict[str, Any] | None = None, keep: set[str] | None = None,
                 kept: dict[str, Any] | None = None, times: dict[str, list[float]] | None = None) -> Any:
    import torch.fx as fx

    class Run(fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            if times is not None:
                _sync(device)
                t0 = time.perf_counter()
            result = super().run_node(n)
            if times is not None:
                _sync(device)
                times.setdefault(n.name, []).append((time.perf_counter() - t0) * 1e3)
            if meta is not None:
                meta[n.name] = describe(result, bounds=n.op == "placeholder")
            if keep is not None and kept is not None and n.name in keep:
                kept[n.name] = _clone(result)
            return result

    return Run(gm)


def _op_name(n: Any, gm: Any) -> str:
    if n.op == "call_module":
        return type(_attr(gm, n.target)).__name__
    if n.op == "call_method":
        return str(n.target)
    if n.op == "call_function":
        return getattr(n.target, "__name__", str(n.target))
    return n.op


def _line(n: Any, filename: str) -> int | None:
    found = None
    for file, line in re.findall(r'File "([^"]+)", line (\d+)', n.stack_trace or ""):
        if file == filename:
            found = int(line)
    return found


@dataclass
class Group:
    """A fusable subgraph: its compute nodes, then (after pulling) the free nodes it recomputes."""

    index: int
    nodes: list[Any] = field(default_factory=list)
    cats: list[str] = field(default_factory=list)
    members: list[Any] = field(default_factory=list)
    attention: bool = False  # q@kᵀ seen
    softmax: bool = False
    attn_done: bool = False
    ms: float = 0.0

    def add(self, n: Any, cat: str) -> None:
        self.nodes.append(n)
        self.cats.append(cat)


class FxGraph:
    """The traced model, its nodes classified and grouped."""

    def __init__(self, gm: Any, meta: dict[str, Any], filename: str):
        self.gm, self.meta, self.filename = gm, meta, filename
        self.nodes = list(gm.graph.nodes)
        self.order = {n: i for i, n in enumerate(self.nodes)}
        self.kind: dict[Any, str] = {}
        self.cat: dict[Any, str] = {}
        for n in self.nodes:
            self.kind[n], self.cat[n] = self._classify(n)
        self.free: dict[Any, bool] = {}
        self._producers: dict[Any, frozenset[Any]] = {}
        for n in self.nodes:
            if self.kind[n] == "ew":
                self.free[n] = not self.producers(n)
            else:
                self.free[n] = self.kind[n] in ("glue", "const")

    def is_tensor(self, n: Any) -> bool:
        return bool(self.meta.get(n.name, {}).get("tensor"))

    def _classify(self, n: Any) -> tuple[str, str]:
        """(kind, category): kind is io, attr, const (a non-tensor value), source (a tensor factory), glue, ew,
        proj or anchor."""
        if n.op in ("placeholder", "output"):
            return "io", ""
        if n.op == "get_attr":
            return "attr", ""
        m = self.meta.get(n.name, {})
        name = _op_name(n, self.gm)
        if not m.get("tensor") and "tuple" not in m:
            return "const", ""
        if name == "getitem" and isinstance(n.args[0], Node) and "tuple" in self.meta.get(n.args[0].name, {}):
            return "proj", ""  # an element of a tuple result: part of its producer (glue if the producer is)
        if name in SOURCES:
            return "source", ""
        if name in GLUE:
            return "glue", ""
        if name in ("max", "min") and any(isinstance(a, Node) and self.is_tensor(a) for a in n.args[1:]):
            return "ew", ""
        for cat, names in CATEGORY.items():
            if name in names:
                return "anchor", cat
        if name in EW:
            return "ew", ""
        return "anchor", "other"

    def producers(self, n: Any) -> frozenset[Any]:
        """The compute (non-free) nodes `n` depends on through free nodes only."""
        found: set[Any] = set()
        for a in n.all_input_nodes:
            if a.op in ("placeholder", "get_attr") or self.kind[a] in ("const", "source"):  # baked in, or an input
                continue
            if self.free.get(a, False) or (self.kind[a] == "proj" and self.free.get(a.args[0], False)):
                found |= self._free_producers(a)
            else:
                found.add(a)
        return frozenset(found)

    def _free_producers(self, n: Any) -> frozenset[Any]:
        if n not in self._producers:
            self._producers[n] = self.producers(n)
        return self._producers[n]

    def weight_operand(self, n: Any) -> bool:
        """A matmul with a parameter operand (x @ W): a linear layer, not q@kᵀ."""
        todo, seen = list(n.all_input_nodes), set()
        while todo:
            a = todo.pop()
            if a in seen:
                continue
            seen.add(a)
            if a.op == "get_attr":
                return True
            if self.kind.get(a) == "glue":
                todo += a.all_input_nodes
        return False

    def group(self) -> list[Group]:
        groups: list[Group] = []
        of: dict[Any, Group] = {}
        for n in self.nodes:
            kind, cat = self.kind[n], self.cat[n]
            if kind == "proj":
                src = n.args[0]
                if src in of:
                    of[n] = of[src]
                    of[n].add(n, "proj")
                else:
                    self.free[n] = True
                continue
            if kind not in ("ew", "anchor") or self.free[n]:
                continue
            prods = [of[p] for p in self.producers(n) if p in of]
            latest = max(prods, key=lambda g: g.index) if prods else None
            act_mm = cat == "matmul" and _op_name(n, self.gm) in ("matmul", "bmm", "mm") and not self.weight_operand(n)
            join = None
            if kind == "ew" and latest is not None:
                join = latest
            elif cat == "softmax" and latest and latest.attention and not latest.softmax and not latest.attn_done:
                join = latest
                latest.softmax = True
            elif act_mm and latest and latest.softmax and not latest.attn_done:
                join = latest
                latest.attn_done = True
            elif (cat == "norm" and "atch" in _op_name(n, self.gm) and latest and latest.cats[0] == "conv"
                  and "norm" not in latest.cats):
                join = latest
            if join is None:
                join = Group(len(groups))
                groups.append(join)
                join.attention = act_mm
            join.add(n, cat or kind)
            of[n] = join
        # free ew nodes that no group needs but the model returns: one group of their own
        rest = [n for n in self.nodes if self.kind[n] == "ew" and self.free[n] and self.is_tensor(n)]
        pulled: set[Any] = set()
        for g in groups:
            g.members = self._pull(g)
            pulled |= set(g.members)
        leftover = [n for n in rest if n not in pulled]
        if leftover:
            g = Group(len(groups))
            for n in leftover:
                g.add(n, "ew")
                self.free[n] = False
            g.members = self._pull(g)
            groups.append(g)
        return groups

    def _pull(self, g: Group) -> list[Any]:
        """The group's compute nodes plus the free tensor-valued nodes they need, in graph order."""
        members = set(g.nodes)
        todo = list(g.nodes)
        while todo:
            for a in todo.pop().all_input_nodes:
                if a in members or a.op in ("placeholder", "get_attr"):
                    continue
                if self.free.get(a) and (self.is_tensor(a) or "tuple" in self.meta.get(a.name, {})):
                    members.add(a)
                    todo.append(a)
        return sorted(members, key=self.order.__getitem__)

    def outputs(self, g: Group) -> list[Any]:
        inside = set(g.members)
        return [n for n in g.nodes if any(u not in inside for u in n.users)]

    def lines(self, g: Group) -> list[int]:
        return sorted({x for n in g.nodes if (x := _line(n, self.filename)) is not None})

    def ops(self, g: Group) -> list[str]:
        return [_op_name(n, self.gm) for n in g.nodes if self.kind[n] != "proj"]


def group_name(ops: list[str], cats: list[str], attention: bool) -> str:
    """A name from what the subgraph contains: its anchors (or `attention`), then its elementwise ops (at most
    two, else `epilogue`)."""
    short = [SHORT.get(o, o.lower()).rstrip("_") for o in ops]
    rest = list(dict.fromkeys(s for s, c in zip(short, cats) if c == "ew"))
    if attention and "softmax" in cats:
        head = "attention"
    else:
        head = "_".join(dict.fromkeys(s for s, c in zip(short, cats) if c not in ("ew", "proj"))) or "elementwise"
    tail = rest[:3] if head == "elementwise" else rest if len(rest) <= 2 else ["epilogue"]
    return re.sub(r"[^a-z0-9_]", "", "_".join([head, *tail]).lower())[:60] or "subgraph"


# ------------------------------------------------------------------------------------------ specs
def _var(name: str) -> str:
    v = re.sub(r"\W", "_", name)
    if not S.IDENT.match(v) or v in S.RESERVED or keyword.iskeyword(v):
        v = f"v_{v}"
    return v[:79]


def module_spec(m: Any, attr: str) -> dict[str, Any]:
    """nn.X(**kwargs) that rebuilds `m` (same state-dict keys, shapes, dtypes), from its own attributes."""
    import inspect

    import torch
    import torch.nn as nn

    cls = type(m)
    if getattr(nn, cls.__name__, None) is not cls:
        raise Unsupported(f"module {attr} is a {cls.__module__}.{cls.__name__}, not a torch.nn class")
    kwargs: dict[str, Any] = {}
    # nn.LSTM(*args, **kwargs) passes them on to RNNBase(mode, input_size, ...): read the first explicit one
    init = next((k.__init__ for k in cls.__mro__ if k is not nn.Module and not any(
        p.kind == p.VAR_POSITIONAL for p in inspect.signature(k.__init__).parameters.values())), cls.__init__)
    for p in list(inspect.signature(init).parameters.values())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in ("device", "dtype", "mode"):
            continue
        if p.name == "inplace":
            kwargs["inplace"] = False  # a task must leave its inputs as they were
            continue
        if p.name == "bias" and not isinstance(getattr(m, "bias", None), bool):
            value: Any = any(k.endswith("bias") and v is not None for k, v in m.named_parameters(recurse=False))
            if not value and hasattr(m, "bias"):
                value = m.bias is not None
        elif hasattr(m, p.name):
            value = getattr(m, p.name)
        elif p.default is not p.empty:
            continue
        else:
            raise Unsupported(f"cannot rebuild nn.{cls.__name__} ({attr}): no attribute for its argument {p.name}")
        if isinstance(value, torch.Tensor):
            raise Unsupported(f"cannot rebuild nn.{cls.__name__} ({attr}): argument {p.name} is a tensor")
        if p.default is not p.empty and type(value) is type(p.default) and value == p.default:
            continue  # defaults stay implicit: nn.GRU keeps a proj_size it refuses to be given
        kwargs[p.name] = encode(value)
    floats = [t.dtype for t in m.parameters(recurse=True) if t.is_floating_point()]
    if floats and floats[0] != torch.float32 and "dtype" in inspect.signature(cls.__init__).parameters:
        kwargs["dtype"] = {"dtype": _dtype_name(floats[0])}
    try:
        rebuilt = cls(**{k: _decode(v) for k, v in kwargs.items()})
    except Exception as exc:  # noqa: BLE001 - any failure means this module cannot be rebuilt
        raise Unsupported(f"cannot rebuild nn.{cls.__name__} ({attr}) from its attributes: {exc}") from None
    want = {k: (tuple(v.shape), v.dtype) for k, v in m.state_dict().items()}
    got = {k: (tuple(v.shape), v.dtype) for k, v in rebuilt.state_dict().items()}
    if want != got:
        raise Unsupported(f"cannot rebuild nn.{cls.__name__} ({attr}): its parameters differ from a fresh one's")
    return {"attr": attr, "cls": cls.__name__, "kwargs": kwargs}


def _decode(v: Any) -> Any:
    import torch

    if isinstance(v, dict):
        (tag, x), = v.items()
        if tag == "tuple":
            return tuple(_decode(e) for e in x)
        if tag == "dtype":
            return getattr(torch, x)
        if tag == "float":
            return float(x)
        raise Unsupported(f"module argument {v}")
    if isinstance(v, list):
        return [_decode(e) for e in v]
    return v


def tensor_spec(t: Any, attr: str) -> dict[str, Any]:
    """A parameter (random, at the real scale: its values are weights) or a buffer (exact: a mask's values are
    its meaning), or `Unsupported` for a buffer whose values cannot be written down."""
    import torch
    import torch.nn as nn

    d: dict[str, Any] = {"attr": attr, "shape": list(t.shape), "dtype": _dtype_name(t.dtype)}
    if isinstance(t, nn.Parameter) and t.is_floating_point():
        std = float(t.detach().float().std()) if t.numel() > 1 else 0.0
        return {**d, "kind": "parameter", "init": {"kind": "randn", "std": std if math.isfinite(std) and std > 0
                                                    else 0.02}}
    d["kind"] = "buffer"
    x = t.detach()
    if x.numel() == 0 or x.is_complex():
        raise Unsupported(f"tensor {attr} (shape {list(t.shape)}) cannot be written down")
    top = float(x.max())
    if bool((x == x.reshape(-1)[0]).all()):
        return {**d, "init": {"kind": "fill", "value": float(x.reshape(-1)[0])}}
    if x.dim() >= 2 and bool(x.float().min() == 0):
        for kind in ("tril", "triu"):
            for diag in (0, -1, 1):
                ref = getattr(torch, kind)(torch.full_like(x, top), diag)
                if torch.equal(ref, x):
                    return {**d, "init": {"kind": kind, "value": top, "diagonal": diag}}
    if x.numel() <= 1024 and x.is_floating_point():
        return {**d, "init": {"kind": "values", "values": [float(v) for v in x.reshape(-1).tolist()]}}
    raise Unsupported(f"buffer {attr} (shape {list(t.shape)}) holds data a task cannot reproduce "
                      "(not constant, not triangular, too large to write out)")


class SpecBuilder:
    """One task spec from a list of steps; names inputs, modules and tensors as it meets them."""

    def __init__(self, name: str):
        self.name = name
        self.inputs: list[dict[str, Any]] = []
        self.modules: list[dict[str, Any]] = []
        self.tensors: list[dict[str, Any]] = []
        self.body: list[dict[str, Any]] = []
        self.outputs: list[str] = []
        self.input_keys: list[str] = []  # what to feed each input from the captured run
        self.module_src: dict[str, str] = {}  # attr -> the model's module path (to copy its state)
        self.tensor_src: dict[str, str] = {}
        self.attrs: dict[str, str] = {}  # model path -> attr

    def attr_name(self, path: str) -> str:
        if path not in self.attrs:
            base = _var(path.replace(".", "_"))
            name, i = base, 1
            while name in self.attrs.values():
                i += 1
                name = f"{base}_{i}"
            self.attrs[path] = name
        return self.attrs[path]

    def add_input(self, key: str, var: str, meta: dict[str, Any]) -> None:
        entry = {"name": var, "shape": meta["shape"], "dtype": meta["dtype"]}
        for b in ("low", "high"):
            if b in meta and math.isfinite(meta[b]):
                entry[b] = meta[b] if meta["dtype"] in S.FLOAT_DTYPES else int(meta[b]) + (b == "high")
        self.inputs.append(entry)
        self.input_keys.append(key)

    def spec(self) -> dict[str, Any]:
        return {"name": self.name, "inputs": self.inputs, "modules": self.modules, "tensors": self.tensors,
                "body": self.body, "outputs": self.outputs}


def fx_spec(graph: FxGraph, g: Group, name: str, input_meta: dict[str, Any]) -> SpecBuilder:
    """The group's members as steps; its inputs are the tensors it takes from outside, non-tensors literals."""
    gm, meta = graph.gm, graph.meta
    b = SpecBuilder(name)
    inside = set(g.members)
    seen_inputs: set[Any] = set()
    var = {n: _var(n.name) for n in graph.nodes}

    def enc(a: Any) -> Any:
        if isinstance(a, Node):
            if a in inside:
                return {"ref": var[a]}
            if a.op == "get_attr":
                attr = b.attr_name(a.target)
                if attr not in b.tensor_src:
                    b.tensors.append(tensor_spec(_attr(gm, a.target), attr))
                    b.tensor_src[attr] = a.target
                return {"attr": attr}
            m = meta.get(a.name, {})
            if m.get("tensor"):
                if a not in seen_inputs:
                    seen_inputs.add(a)
                    b.add_input(a.name, var[a], {**m, **input_meta.get(a.name, {})})
                return {"ref": var[a]}
            if "value" in m:
                return m["value"]
            raise Unsupported(f"takes {a.name} ({m.get('other', 'a tuple')}) from outside the subgraph")
        if isinstance(a, tuple):
            return {"tuple": [enc(x) for x in a]}
        if isinstance(a, list):
            return [enc(x) for x in a]
        if isinstance(a, slice):
            return {"slice": [enc(a.start), enc(a.stop), enc(a.step)]}
        if isinstance(a, dict):
            raise Unsupported("passes a dict argument")
        return encode(a)

    for n in g.members:
        step: dict[str, Any] = {"out": var[n]}
        kwargs = dict(n.kwargs)
        if n.op == "call_module":
            attr = b.attr_name(n.target)
            if attr not in b.module_src:
                b.modules.append(module_spec(_attr(gm, n.target), attr))
                b.module_src[attr] = n.target
            step.update(op="module", target=attr)
        elif n.op == "call_method":
            step.update(op="method", target=str(n.target))
        elif n.op == "call_function":
            ns, fname = function_name(n.target)
            if kwargs.get("inplace") is True:
                kwargs["inplace"] = False
            step.update(op="function", target=f"{ns}.{fname}")
        else:
            raise Unsupported(f"node {n.name} ({n.op})")
        step["args"] = [enc(a) for a in n.args]
        # private keywords torch's dispatch adds (F.softmax's `_stacklevel`) are not the model's
        step["kwargs"] = {k: enc(v) for k, v in kwargs.items() if not k.startswith("_")}
        b.body.append(step)
    for n in graph.outputs(g):
        if not graph.is_tensor(n):
            raise Unsupported(f"{n.name} leaves the subgraph as {meta.get(n.name, {}).get('other', 'a tuple')}, "
                              "not a tensor")
        b.outputs.append(var[n])
    return b


# ------------------------------------------------------------------------------------------ checks
def check_task(b: SpecBuilder, code: str, index: int, device: str, real: Any, feeds: list[Any],
               expected: list[Any], reps: int) -> dict[str, Any]:
    """Load the rendered task, give it the model's own parameters, run it on the captured inputs and compare with
    the captured intermediates; then build it standalone and check it runs with the recorded output shapes."""
    import torch

    from kernelsmith.referee.compare import compare_outputs
    from kernelsmith.task import load_module

    mod = load_module(code, f"<extracted:{b.name}>", f"kernelsmith_extracted_{index}")
    task_model, task_inputs = _build(mod, device)
    out: dict[str, Any] = {}
    with torch.no_grad():
        alone = task_model(*task_inputs)
        got = [tuple(t.shape) for t in _flat(alone)]
        want = [tuple(t.shape) for t in expected]
        out["standalone"] = {"ok": got == want, "output_shapes": [list(s) for s in got]}
        for attr, path in b.module_src.items():
            getattr(task_model, attr).load_state_dict(_attr(real, path).state_dict())
        for attr, path in b.tensor_src.items():
            getattr(task_model, attr).copy_(_attr(real, path))
        result = task_model(*[_clone(f) for f in feeds])
        cmp = compare_outputs([t.detach() for t in _flat(result)], list(expected))
        out["check"] = {"ok": cmp.ok, "max_abs_err": _finite(cmp.max_abs_err),
                        "max_rel_err": _finite(cmp.max_rel_err), "reason": cmp.reason,
                        "against": "the model's own intermediates, same inputs and parameters"}
        out["task_ms"] = round(_median_ms(lambda: task_model(*feeds), reps, device), 4)
    return out


def _flat(v: Any) -> list[Any]:
    return [t for _, t in _flat_tensors(v)]


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


# ------------------------------------------------------------------------------------------ the two paths
def _reps(one_ms: float) -> int:
    return int(max(MIN_REPS, min(MAX_REPS, TIME_BUDGET_S * 1e3 / 3 / max(one_ms, 1e-3))))


def _profile(model: Any, inputs: list[Any], device: str) -> list[dict[str, Any]]:
    """The top operators of one forward by self time, as torch.profiler sees them."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=acts) as prof:
        model(*inputs)
        _sync(device)
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    rows = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[:10]
    return [{"op": e.key[:80], "self_ms": round(getattr(e, key, 0.0) / 1e3, 4), "calls": e.count} for e in rows]


def run_fx(model: Any, inputs: list[Any], expected: list[Any], job: dict[str, Any], reps: int,
           model_ms: float) -> dict[str, Any]:
    from kernelsmith.referee.compare import compare_outputs

    device, filename = job["device"], job["filename"]
    gm = fx_trace(model, len(inputs))
    meta: dict[str, Any] = {}
    _seed_all(SEED)  # as before the eager run: a forward that draws random numbers draws the same ones
    traced = _interpreter(gm, device, meta=meta).run(*inputs)
    cmp = compare_outputs([t.detach() for t in _flat(traced)], expected)
    if not cmp.ok:
        raise Unsupported(f"the fx graph does not reproduce the model's output ({cmp.reason})")
    graph = FxGraph(gm, meta, filename)
    groups = graph.group()
    times: dict[str, list[float]] = {}
    for _ in range(reps):
        _interpreter(gm, device, times=times).run(*inputs)
    node_ms = {k: statistics.median(v) for k, v in times.items()}
    counted: set[Any] = set()
    for g in groups:
        g.ms = sum(node_ms.get(n.name, 0.0) for n in g.members if n not in counted)
        counted |= set(g.members)
    total = sum(node_ms.values())
    denom = max(model_ms, total, 1e-9)
    ranked = sorted(groups, key=lambda g: g.ms, reverse=True)
    top = ranked[: job["top"]]
    # capture exactly what the top groups need: their inputs and outputs, cloned as produced
    names: dict[int, tuple[str, list[Any]]] = {}
    builders: dict[int, SpecBuilder | str] = {}
    keep: set[str] = set()
    input_meta = {k: v for k, v in meta.items() if "low" in v}
    used: dict[str, int] = {}
    for g in top:
        base = group_name(graph.ops(g), g.cats, g.attention)
        used[base] = used.get(base, 0) + 1
        name = base if used[base] == 1 else f"{base}_{used[base]}"
        names[g.index] = (name, graph.outputs(g))
        try:
            b = fx_spec(graph, g, name, input_meta)
            builders[g.index] = b
            keep |= set(b.input_keys) | {n.name for n in graph.outputs(g)}
        except Unsupported as exc:
            builders[g.index] = str(exc)
    kept: dict[str, Any] = {}
    _seed_all(SEED)
    _interpreter(gm, device, keep=keep, kept=kept).run(*inputs)
    out_groups = []
    for rank, g in enumerate(ranked):
        entry: dict[str, Any] = {"ops": graph.ops(g), "line": _line(g.nodes[0], filename), "lines": graph.lines(g),
                                 "ms": round(g.ms, 4), "share": round(g.ms / denom, 6)}
        if g.index not in builders:
            entry["name"] = group_name(graph.ops(g), g.cats, g.attention)
            out_groups.append(entry)
            continue
        entry["name"], outs = names[g.index]
        entry["outputs"] = [{"shape": meta[n.name].get("shape"), "dtype": meta[n.name].get("dtype")}
                            for n in outs if meta.get(n.name, {}).get("tensor")]
        b = builders[g.index]
        if isinstance(b, str):
            entry["reason"] = b
        else:
            entry.update(_finish(b, rank, device, model, [kept[k] for k in b.input_keys],
                                 [kept[n.name] for n in outs], reps))
            entry["site"] = site(g, b, outs)
        out_groups.append(entry)
    found: dict[str, Any] = {"trace": "fx", "nodes_ms": round(total, 4), "groups": out_groups}
    try:
        found["graph"] = graph_spec(gm, model, meta)
    except Unsupported as exc:  # optimize cannot swap parts into this model's forward: it says why
        found["graph_note"] = str(exc)[:300]
    return found


def site(g: Group, b: SpecBuilder, outs: list[Any]) -> dict[str, Any]:
    """Where the task sits in the model's graph (`graph_spec`'s variable names), for `kernelsmith optimize`:
    the nodes it replaces, the graph values that feed its inputs and receive its outputs, and the model's
    parameters behind the task's own (task state key -> the model's dotted path)."""
    return {"nodes": [_var(n.name) for n in g.nodes], "members": [_var(n.name) for n in g.members],
            "feeds": [_var(k) for k in b.input_keys], "returns": [_var(n.name) for n in outs],
            "modules": dict(b.module_src), "tensors": dict(b.tensor_src)}


def graph_spec(gm: Any, model: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """The whole traced forward as data (`kernelsmith.optimize.assemble` renders it into `ModelNew.forward`):
    steps over variables named as in `site`, module calls and attributes by their path in the user's model,
    functions by their public torch / F / operator / math name. `Unsupported` for what cannot be written so (a
    function outside those namespaces, a tensor fx folded into a constant on a device)."""
    import inspect

    import torch

    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = {n: _var(n.name) for n in gm.graph.nodes}

    def enc(a: Any) -> Any:
        if isinstance(a, Node):
            return {"ref": var[a]}
        if isinstance(a, tuple):
            return {"tuple": [enc(x) for x in a]}
        if isinstance(a, list):
            return [enc(x) for x in a]
        if isinstance(a, slice):
            return {"slice": [enc(a.start), enc(a.stop), enc(a.step)]}
        if isinstance(a, dict):
            raise Unsupported("the forward passes a dict argument")
        if isinstance(a, torch.device):
            raise Unsupported(f"the forward names a device ({a}) as a constant")
        return encode(a)

    steps: list[dict[str, Any]] = []
    placeholders = 0
    for n in gm.graph.nodes:
        step: dict[str, Any] = {"out": var[n]}
        if n.op == "placeholder":
            if placeholders >= len(params) or str(n.target).startswith("*"):
                raise Unsupported("the forward takes *args or **kwargs")
            step.update(op="placeholder", target=params[placeholders].name)
            if n.args:
                step["default"] = enc(n.args[0])
            placeholders += 1
        elif n.op == "get_attr":
            try:
                value = _attr(model, n.target)
            except AttributeError:  # a tensor fx made a constant of (`torch.zeros(2)` in forward)
                value = _attr(gm, n.target)
                if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
                    raise Unsupported(f"the forward folds {n.target} into a constant fx cannot name") from None
                step.update(op="tensor", tensor=tensor_spec(value.detach(), "constant"))
                steps.append(step)
                continue
            step.update(op="attr", target=n.target)
        elif n.op == "call_module":
            step.update(op="module", target=n.target)
        elif n.op == "call_method":
            step.update(op="method", target=str(n.target))
        elif n.op == "call_function":
            if not n.users and getattr(n.target, "__module__", "").startswith("torch.fx"):
                continue  # fx's own guards (`_assert_is_none` for a specialised default)
            ns, fname = function_name(n.target)
            step.update(op="function", target=f"{ns}.{fname}")
        elif n.op == "output":
            step.update(op="output")
        else:
            raise Unsupported(f"node {n.name} ({n.op})")
        step["args"] = [enc(a) for a in n.args]
        step["kwargs"] = {k: enc(v) for k, v in n.kwargs.items() if not k.startswith("_")}
        if step.get("op") == "placeholder":
            step["args"], step["kwargs"] = [], {}
        steps.append(step)
    if len(steps) > 20000:
        raise Unsupported(f"the forward has {len(steps)} steps")
    return {"steps": steps, "tensor_values": {var[n]: bool(meta.get(n.name, {}).get("tensor"))
                                              for n in gm.graph.nodes}}


def _finish(b: SpecBuilder, rank: int, device: str, real: Any, feeds: list[Any], expected: list[Any],
            reps: int) -> dict[str, Any]:
    """Render the spec, check the task; a failure becomes the group's reason."""
    entry: dict[str, Any] = {"inputs": [{"shape": i["shape"], "dtype": i["dtype"]} for i in b.inputs]}
    try:
        code = S.render_code(b.spec())
    except S.SpecError as exc:
        return {**entry, "reason": f"cannot be written as a task: {exc}"}
    entry.update(spec=b.spec(), digest=S.digest(code))
    try:
        entry.update(check_task(b, code, rank, device, real, feeds, expected, max(MIN_REPS, reps // 3)))
    except BaseException as exc:  # noqa: BLE001 - the extracted task failed to run: its reason
        entry.pop("spec")
        entry["reason"] = f"the extracted task does not run: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return entry


def run_hooks(model: Any, inputs: list[Any], expected: list[Any], job: dict[str, Any], reps: int,
              model_ms: float) -> dict[str, Any]:
    """Each call of a torch.nn module (the outermost ones) is a subgraph; timed between its pre- and post-hook."""
    device, filename = job["device"], job["filename"]
    hooked: list[tuple[str, Any]] = []
    for path, m in model.named_modules():
        if not path or type(m).__name__ in CONTAINERS or not type(m).__module__.startswith("torch.nn"):
            continue
        if any(path.startswith(p + ".") for p, _ in hooked):
            continue
        hooked.append((path, m))
    calls: list[dict[str, Any]] = []
    state: dict[str, Any] = {"i": 0, "capture": True, "stack": []}

    def pre(path: str) -> Any:
        def hook(mod: Any, args: Any, kwargs: Any) -> None:
            _sync(device)
            if state["capture"]:
                line = None
                for fr in traceback.extract_stack():
                    if fr.filename == filename:
                        line = fr.lineno
                calls.append({"path": path, "args": _clone(args), "kwargs": _clone(kwargs), "line": line,
                              "times": []})
            state["stack"].append((state["i"], time.perf_counter()))
            state["i"] += 1
        return hook

    def post(mod: Any, args: Any, kwargs: Any, output: Any) -> None:
        _sync(device)
        i, t0 = state["stack"].pop()
        if i < len(calls):
            calls[i]["times"].append((time.perf_counter() - t0) * 1e3)
            if state["capture"]:
                calls[i]["output"] = _clone(output)

    handles = []
    for path, m in hooked:
        handles.append(m.register_forward_pre_hook(pre(path), with_kwargs=True))
        handles.append(m.register_forward_hook(post, with_kwargs=True))
    try:
        for r in range(reps + 1):
            state["i"], state["capture"] = 0, r == 0
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    total = sum(statistics.median(c["times"][1:] or c["times"]) for c in calls)
    denom = max(model_ms, total, 1e-9)
    for c in calls:
        c["ms"] = statistics.median(c["times"][1:] or c["times"])
    ranked = sorted(range(len(calls)), key=lambda i: calls[i]["ms"], reverse=True)
    out_groups, used = [], {}
    for rank, i in enumerate(ranked):
        c = calls[i]
        cls = type(_attr(model, c["path"])).__name__
        base = SHORT.get(cls, cls.lower())
        used[base] = used.get(base, 0) + 1
        name = base if used[base] == 1 else f"{base}_{used[base]}"
        entry: dict[str, Any] = {"name": name, "ops": [cls], "line": c["line"], "lines": [c["line"]] if c["line"] else [],
                                 "ms": round(c["ms"], 4), "share": round(c["ms"] / denom, 6)}
        if rank < job["top"]:
            expected_out = [t for _, t in _flat_tensors(c.get("output"))]
            entry["outputs"] = [describe(t) for t in expected_out]
            try:
                b = hook_spec(c, name, _attr(model, c["path"]))
                entry.update(_finish(b, rank, device, model, [c["feeds"][k] for k in b.input_keys],
                                     expected_out, reps))
                if "spec" in entry and _tensor_tree(c.get("output")):
                    entry["site"] = {"kind": "module", "path": c["path"], "args": b.body[0]["args"],
                                     "kwargs": b.body[0]["kwargs"],
                                     "outputs": [list(path) for path, _ in _flat_tensors(c.get("output"))],
                                     "modules": dict(b.module_src), "tensors": {}}
            except Unsupported as exc:
                entry["reason"] = str(exc)
        out_groups.append(entry)
    return {"trace": "hooks", "nodes_ms": round(total, 4), "groups": out_groups}


def _tensor_tree(v: Any) -> bool:
    """A tensor, or nested tuples of tensors only: what a module call's output can be rebuilt from its leaves."""
    import torch

    if isinstance(v, torch.Tensor):
        return True
    return type(v) is tuple and bool(v) and all(_tensor_tree(x) for x in v)


def hook_spec(call: dict[str, Any], name: str, module: Any) -> SpecBuilder:
    """`self.m(*args, **kwargs)` for one recorded call; tensor arguments become inputs, tuple outputs are
    flattened into one output per tensor."""
    import torch

    b = SpecBuilder(name)
    attr = b.attr_name(call["path"])
    b.modules.append(module_spec(module, attr))
    b.module_src[attr] = call["path"]
    call["feeds"] = {}

    def enc(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            key = f"x{len(b.inputs)}"
            call["feeds"][key] = v
            b.add_input(key, key, describe(v, bounds=True))
            return {"ref": key}
        if isinstance(v, (tuple, list)) and any(isinstance(x, torch.Tensor) for x in v):
            items = [enc(x) for x in v]
            return {"tuple": items} if isinstance(v, tuple) else items
        return encode(v)

    args = [enc(a) for a in call["args"]]
    kwargs = {k: enc(v) for k, v in call["kwargs"].items()}
    b.body.append({"out": "out", "op": "module", "target": attr, "args": args, "kwargs": kwargs})
    leaves = _flat_tensors(call.get("output"))
    if not leaves:
        raise Unsupported("the module returns no tensor")
    for path, _ in leaves:
        if not path:
            b.outputs.append("out")
            continue
        src = "out"
        for depth, i in enumerate(path):
            var = "out_" + "_".join(str(p) for p in path[: depth + 1])
            if var not in {s["out"] for s in b.body}:
                b.body.append({"out": var, "op": "function", "target": "operator.getitem",
                               "args": [{"ref": src}, i], "kwargs": {}})
            src = var
        b.outputs.append(src)
    return b


def run(job: dict[str, Any]) -> dict[str, Any]:
    import platform

    import torch

    from kernelsmith.task import load_module

    device, filename = job["device"], job["filename"]
    torch.set_grad_enabled(False)
    try:
        module = load_module(job["source"], filename, MODULE_NAME)
    except BaseException as exc:  # noqa: BLE001 - the model's code: any failure is the model's
        raise ModelFailure(f"running the model file raised: {_one_line(exc, filename)}") from None
    model, inputs = _build(module, device)
    try:
        _seed_all(SEED)
        t0 = time.perf_counter()
        first = model(*inputs)
        _sync(device)
        one_ms = (time.perf_counter() - t0) * 1e3
    except BaseException as exc:  # noqa: BLE001
        raise ModelFailure(f"Model.forward raised: {_one_line(exc, filename)}") from None
    expected = [t.detach().clone() for t in _flat(first)]
    if not expected:
        raise ModelFailure("Model.forward returned no tensor")
    reps = _reps(one_ms)
    model_ms = _median_ms(lambda: model(*inputs), reps, device)
    try:
        profile = _profile(model, inputs, device)
    except Exception as exc:  # noqa: BLE001 - the profile is extra information, not the result
        profile = [{"error": f"{type(exc).__name__}: {exc}"[:200]}]
    note = ""
    try:
        found = run_fx(model, inputs, expected, job, reps, model_ms)
    except BaseException as exc:  # noqa: BLE001 - fx could not trace (or replay) it: hooks instead
        if isinstance(exc, (KeyboardInterrupt, SystemExit, MemoryError)):
            raise
        note = f"torch.fx: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        # a forward that assigns `self.x = ...` left fx's proxies in the model while it was traced: a fresh one
        model, inputs = _build(module, device)
        found = run_hooks(model, inputs, expected, job, reps, model_ms)
    return {"ok": True, **found, "trace_note": note, "device": device, "model_ms": round(model_ms, 4),
            "reps": reps, "model_inputs": [describe(x) for x in inputs if isinstance(x, torch.Tensor)],
            "model_outputs": [describe(t) for t in expected], "profile": profile,
            "versions": {"python": platform.python_version(), "torch": torch.__version__}}


def main(work: Path) -> int:
    job = json.loads((work / "job.json").read_text())
    try:
        result = run(job)
    except ModelFailure as exc:
        result = {"ok": False, "fault": "model", "error": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - reported to the orchestrator, which says it in one line
        result = {"ok": False, "fault": "extract", "error": f"{type(exc).__name__}: {exc}"[:1000],
                  "traceback": traceback.format_exc()[-4000:]}
    tmp = work / "result.tmp"
    tmp.write_text(json.dumps(result, allow_nan=False, default=str))
    os.replace(tmp, work / RESULT)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
