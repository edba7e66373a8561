"""Lowering: each traced fx node (with its meta value) becomes IR values — elementwise (`ew`), reductions (`red`),
matmuls (`mm`) and glue left to torch in forward; composite ops (softmax, norms, var) are expanded here."""

from __future__ import annotations

import math
import re
from typing import Any

import torch
import torch.fx as fx

from kernelsmith.compiler import templates as T
from kernelsmith.compiler.ir import (
    _GLUE_FUNCTIONS,
    _GLUE_METHODS,
    _IDENTITY,
    _MATH,
    _PY_OPS,
    _SKIP,
    DOT_DTYPES,
    FLOAT_DTYPES,
    SeedUnsupported,
    _at,
    _AttrRef,
    _broadcast,
    _canon,
    _describe,
    _flat,
    _node_line,
    _Pair,
    _qualname,
    _Val,
)
from kernelsmith.compiler.library import (
    Declined,
    NodeInfo,
    TensorInfo,
    check_kernel,
    family_of,
    op_key,
    registry,
)


def _lowered_namespace(ns: str, name: str) -> bool:
    """Whether a call_function from `ns` can be lowered at all (Python's math only on sizes: glue)."""
    return ns in ("torch", "torch.nn.functional", "operator", "builtins", "torch.special") or (
        ns == "math" and name in _MATH)


def _known(node: fx.Node, gm: fx.GraphModule) -> bool:
    """Whether `_Lowerer.call` could lower `node` for some values of its arguments: False means refused
    whatever the shapes, so a model with such an operator is refused before any shape is propagated (an RNN
    run on real CPU tensors to learn shapes took minutes, only to be refused at its `nn.LSTM`)."""
    if node.op == "call_function" and getattr(node.target, "__name__", "") in _SKIP:
        return True  # the guards fx adds for specialised arguments (removed before lowering)
    key = op_key(node, gm)
    if key is not None and key in registry():
        return True  # a library kernel (which may still refuse the node's form when lowering)
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        return hasattr(_Lowerer, f"mod_{type(mod).__name__}") and type(mod).__module__.startswith("torch.nn")
    if node.op == "call_method":
        name, ns = node.target, "method"
    elif node.op == "call_function":
        ns, name = _qualname(node.target)
        if not _lowered_namespace(ns, name):
            return False
        if ns == "math":
            return True
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


# ----------------------------------------------------------------------------------------------- lowering


class _Lowerer:
    """fx graph (with meta values) → IR values; composite ops are expanded here."""

    def __init__(self, gm: fx.GraphModule, model: torch.nn.Module, filename: str = "<task>",
                 policy: str = "strict", vendor: frozenset[str] = frozenset(), precision: str | None = None):
        self.gm, self.model, self.filename, self.policy = gm, model, filename, policy
        self.precision = precision  # what library entries with dots compute at (None: the default)
        self.vendor = vendor if policy == "lenient" else frozenset()  # library families left to torch's call
        self.externs: dict[fx.Node, _Val] = {}   # lenient: nodes left to torch
        self.families: set[str] = set()          # library families this graph has operators of (vendored too)
        self.copy_only = False                   # lenient: every operator stayed torch's; only a copy kernel
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
            if path.split(".")[-1].startswith("_tensor_constant"):  # fx stored a tensor made while tracing
                made = self._made_in_forward(path)
                if made is not None:
                    return made
                raise SeedUnsupported(f"{_at(self.filename, _node_line(self.node, self.filename))}get_attr {path}: "
                                      "a tensor created in forward (torch.tensor(...)) has no template")
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

    def _made_in_forward(self, path: str) -> _Val | None:
        """A tensor the forward makes from Python values, with the value it had while tracing (as other
        trace-time Python values are specialised): a 0-dim one (`torch.tensor(self.constant_value)`, KernelBench
        level2/31) is the number (`number_tensor`); under lenient a small one is the same `torch.tensor(...)`
        call in the generated forward, on the inputs' device."""
        obj = getattr(self.gm, path, None)
        if (isinstance(obj, torch.Tensor) and not obj.is_meta and obj.dim() == 0 and obj.dtype != torch.bool
                and not obj.is_complex()):
            # Both policies: a 0-dim constant (`torch.min(x, torch.tensor(self.c))`, level2/31) is a number
            # in the kernel, as torch's type promotion makes it for a float tensor: no tensor, no host copy.
            self.params[path] = self.number_tensor(obj.item(), path)
            return self.params[path]
        first = next((v for v in self.vals if v.kind == "input"), None)
        if (self.policy != "lenient" or not isinstance(obj, torch.Tensor) or obj.is_meta or obj.numel() > 64
                or first is None):
            return None
        value, dtype = obj.tolist(), str(obj.dtype)

        def render(nm: Any) -> str:
            return f"torch.tensor({value!r}, dtype={dtype}, device={nm(first)}.device)"

        v = self.new("glue", "extern", (first,), shape=tuple(obj.shape), dtype=obj.dtype, render=render)
        v.params["extern"] = f"torch.tensor({value!r}) made in forward"
        v.origin = path
        self.params[path] = v
        return v

    def number_tensor(self, value: float, path: str) -> _Val:
        """A 0-dim tensor of a Python number: in the kernel, the number (a float tensor's ops promote it away)."""
        value = float(value)
        v = self.new("glue", "attr", value=value, render=lambda nm, x=value: repr(x))
        v.params.update(path=path, scalar_tensor=True)
        v.origin = path
        return v

    def op_tensor(self, data, dtype=None, device=None, requires_grad=False, pin_memory=False):
        """`torch.tensor(c, device=x.device)` of a number (level2/83, /93): the number, as `number_tensor`."""
        value, dt = self.const(data), self.const(dtype)
        if (isinstance(value, bool) or not isinstance(value, (int, float))
                or (dt is not None and not (isinstance(dt, torch.dtype) and dt.is_floating_point))):
            raise self.unsupported("torch.tensor of anything but a float number has no template")
        return self.number_tensor(value, f"{self.node.name}_value" if self.node is not None else "tensor_value")

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
                    if a.dtype != torch.bool:  # masks (1.0 / 0.0 in a kernel) may feed any op
                        self._check_float(a)
                elif not isinstance(a.value, (int, float, bool)):
                    raise self.unsupported(f"operand {a.value!r} is not a number")
            elif not isinstance(a, (int, float, bool)):
                raise self.unsupported(f"operand {a!r} is not a tensor or a number")
        shape = _broadcast([t.shape for t in tensors])
        if dtype is None:
            dtype = self.node_dtype if self.node_dtype in FLOAT_DTYPES else tensors[0].dtype
        return self.new("ew", op, args, params, shape, dtype)

    def red(self, kind: str, x: Any, dim: Any, keepdim: Any, correction: float = 0.0, dtype: Any = None) -> _Val:
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
        if dtype is None:
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
                out = self.lower_call(node)
                if isinstance(out, _Val) and out.tensor:
                    if not isinstance(val, torch.Tensor) or tuple(val.shape) != out.shape:
                        got = tuple(val.shape) if isinstance(val, torch.Tensor) else type(val).__name__
                        raise SeedUnsupported(f"{self.here()}: internal shape mismatch ({out.shape} vs {got})")
                    out.dtype = val.dtype
                self.env[node] = out
        if self.policy == "lenient":
            self._ensure_kernel()

    def lower_call(self, node: fx.Node) -> Any:
        """A library kernel when the registry has one for the node; else the templates; under lenient, what
        neither covers stays the torch call (an extern)."""
        lib = self.library(node)
        if lib is not None:
            return lib
        try:
            try:
                return self.call(node)
            except SeedUnsupported as exc:  # raised below the node's handler (broadcasting, ...): say where
                if self.here() in str(exc):
                    raise
                raise SeedUnsupported(f"{self.here()}: {exc}") from None
        except SeedUnsupported:
            if self.policy != "lenient":
                raise
            return self.extern(node)

    # -- library kernels (kernelsmith.compiler.library)
    def _placeholder(self, a: Any) -> str:
        """Python source for a call argument with each IR value as a token `__ks_v<id>__`, named at emit time."""
        return _arg(a, lambda v: f"__ks_v{v.id}__")

    def _trace_value(self, a: Any) -> Any:
        if isinstance(a, _Val):
            return TensorInfo(a.shape, a.dtype) if a.tensor else a.value
        if isinstance(a, (list, tuple)) and not isinstance(a, torch.Size):
            return type(a)(self._trace_value(x) for x in a)
        if isinstance(a, dict):
            return {k: self._trace_value(x) for k, x in a.items()}
        return a

    def library(self, node: fx.Node) -> _Val | None:
        key = op_key(node, self.gm)
        entry = registry().get(key) if key else None
        if entry is not None and family_of(key):
            self.families.add(str(family_of(key)))
        if entry is None or family_of(key) in self.vendor:
            return None
        args = self._attrs(fx.node.map_arg(node.args, lambda n: self.env[n]))
        kwargs = dict(self._attrs(fx.node.map_arg(node.kwargs, lambda n: self.env[n])))
        if any(isinstance(a, _Pair) for a in _leaves_of([args, kwargs])):
            return None
        val = node.meta.get("val")
        mod, path, hyper, params = None, None, {}, {}
        if node.op == "call_module":
            path = str(node.target)
            mod = self.gm.get_submodule(path)
            hyper = {k: v for k, v in vars(mod).items() if not k.startswith("_") and not isinstance(v, torch.Tensor)}
            params = {k: (None if t is None else f"_ks_attr(self, {f'{path}.{k}'!r})")
                      for k, t in [*mod._parameters.items(), *mod._buffers.items()]}
        try:
            info = NodeInfo(
                key=key, kind=node.op, target=str(getattr(node.target, "__name__", node.target)),
                args=tuple(self._placeholder(a) for a in args),
                kwargs={k: self._placeholder(a) for k, a in kwargs.items()},
                values=tuple(self._trace_value(a) for a in args),
                kwvalues={k: self._trace_value(a) for k, a in kwargs.items()},
                out=self._trace_value_of_meta(val), module=mod,
                module_expr=None if path is None else f"_ks_attr(self, {path!r})", hyper=hyper, params=params,
                training=bool(getattr(mod, "training", False)), where=self.here(), precision=self.precision)
            lib, call_args = entry(info)
            check_kernel(lib)
        except Declined:
            return None
        except SeedUnsupported:
            if self.policy == "lenient":
                return None
            raise
        call = f"{lib.launcher}({', '.join(call_args)})"
        if not isinstance(val, torch.Tensor):
            raise self.unsupported(f"library kernel {lib.name!r} for a node whose result is not one tensor")
        out = self.glue(lambda nm, c=call: self._substitute(c, nm), "library", [args, kwargs])
        out.params["lib"] = lib
        return out

    def _trace_value_of_meta(self, val: Any) -> Any:
        if isinstance(val, torch.Tensor):
            return TensorInfo(tuple(val.shape), val.dtype)
        if isinstance(val, (list, tuple)) and not isinstance(val, torch.Size):
            return type(val)(self._trace_value_of_meta(x) for x in val)
        return val

    def _substitute(self, text: str, nm: Any) -> str:
        return re.sub(r"__ks_v(\d+)__", lambda m: nm(self.vals[int(m.group(1))]), text)

    # -- externs (lenient): the torch call itself, a fusion barrier
    def extern(self, node: fx.Node) -> _Val:
        """`node` as the torch call it is (`self.<module>(...)`, `torch.<fn>(...)`, `x.<method>(...)`); its
        result's shape comes from shape propagation. Refused only when the call cannot be written as Python."""
        if node in self.externs:
            return self.externs[node]
        self.node = node
        args = self._attrs(fx.node.map_arg(node.args, lambda n: self.env[n]))
        kwargs = dict(self._attrs(fx.node.map_arg(node.kwargs, lambda n: self.env[n])))
        args, kwargs = self._unpair(args), self._unpair(kwargs)
        if node.op == "call_method" and str(node.target).endswith("_") and not str(node.target).startswith("_"):
            self._inplace_ok(node)
        pos = [self._placeholder(a) for a in args]
        kw = [f"{k}={self._placeholder(a)}" for k, a in kwargs.items()]
        if node.op == "call_module":
            text = f"_ks_attr(self, {str(node.target)!r})({', '.join(pos + kw)})"
        elif node.op == "call_method":
            if not pos:
                raise self.unsupported("a method call without its tensor")
            text = f"{pos[0]}.{node.target}({', '.join(pos[1:] + kw)})"
        else:
            text = _function_call(node.target, pos, kw)
            if text is None:
                raise self.unsupported("no template, and not a torch function that could stay a torch call")
        out = self.glue(lambda nm, c=text: self._substitute(c, nm), "extern", [args, kwargs])
        out.params["extern"] = _describe(node, self.gm)
        self.externs[node] = out
        return out

    def _unpair(self, obj: Any) -> Any:
        """A `torch.max(x, dim)` pair read as a whole (its indices): the torch call itself."""
        if isinstance(obj, _Pair):
            if obj.node is None:
                raise self.unsupported("the indices of max/min have no template")
            here = self.node
            try:
                return self.extern(obj.node)
            finally:
                self.node = here
        if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
            return type(obj)(self._unpair(o) for o in obj)
        if isinstance(obj, dict):
            return {k: self._unpair(o) for k, o in obj.items()}
        return obj

    def _ensure_kernel(self) -> None:
        """Lenient: a program must launch at least one Triton kernel doing work it needs. When every operator
        stayed a torch call, the results are written through an elementwise copy kernel (the final copy)."""
        live = _live_vals(self.outputs)
        if any(v.kind in ("ew", "red", "mm") or (v.kind == "glue" and v.op == "library") for v in live):
            return
        tensors = [v for v in _flat(self.outputs) if v.tensor and v.shape is not None]
        if not tensors:
            raise SeedUnsupported(f"{self.filename}: Model.forward returns no tensor a kernel could write")
        self.node = None
        self.copy_only = True
        copies = {v: self.new("ew", "identity", (v,), {}, v.shape, v.dtype) for v in tensors}
        self.outputs = _replace_vals(self.outputs, copies)

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
            if not _lowered_namespace(ns, name):
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
            x = args[0]
            if name == "contiguous" and isinstance(x, _Val) and x.kind not in ("ew", "red", "mm"):
                # a view (transpose, permute) made contiguous before a .view(): torch copies it
                return self._tensor_glue(node, ns, name, args, kwargs)
            return x
        if ns == "torch" and name == "tensor":  # of a number: the number (no tensor, no host copy)
            return self.op_tensor(*args, **kwargs)
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
        if ns == "math" and name in _MATH and not kwargs:
            return self.glue(lambda nm, a=args: f"math.{name}({', '.join(_arg(x, nm) for x in a)})", name, args)
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

    def _compare(self, op: str, input: Any, other: Any) -> _Val:
        return self.ew(op, input, other, dtype=torch.bool)

    def op_eq(self, input, other): return self._compare("eq", input, other)
    def op_ne(self, input, other): return self._compare("ne", input, other)
    def op_lt(self, input, other): return self._compare("lt", input, other)
    def op_le(self, input, other): return self._compare("le", input, other)
    def op_gt(self, input, other): return self._compare("gt", input, other)
    def op_ge(self, input, other): return self._compare("ge", input, other)
    def op_logical_not(self, input): return self.ew("logical_not", input, dtype=torch.bool)

    def op_where(self, condition, input=None, other=None):
        if input is None or other is None:
            raise self.unsupported("torch.where(condition) (the indices) has no template")
        return self.ew("where", condition, input, other)

    def op_masked_fill(self, input, mask, value):
        if isinstance(value, _Val) and value.tensor:
            raise self.unsupported("masked_fill with a tensor value has no template")
        return self.ew("masked_fill", input, mask, value)

    # -- constants shaped like a tensor: a fill in the elementwise kernel (masked_fill under an all-true mask, so
    # NaN and inf in the input do not leak into the result, as `x * 0` would let them)
    def op_zeros_like(self, input, **kwargs): return self._full_like(input, 0.0, **kwargs)
    def op_ones_like(self, input, **kwargs): return self._full_like(input, 1.0, **kwargs)
    def op_full_like(self, input, fill_value, **kwargs): return self._full_like(input, fill_value, **kwargs)

    def _full_like(self, x, value, dtype=None, layout=None, device=None, pin_memory=None, requires_grad=False,
                   memory_format=None):
        if not (isinstance(x, _Val) and x.tensor):
            raise self.unsupported("a *_like of a non-tensor")
        if self.const(layout) not in (None, torch.strided) or self.const(requires_grad) or self.const(
                memory_format) not in (None, torch.preserve_format, torch.contiguous_format):
            raise self.unsupported("a *_like with a layout, memory format or requires_grad has no template")
        if device is not None and not isinstance(device, _Val):  # `device=x.device` is traced; a constant is not
            raise self.unsupported("a *_like on a constant device has no template")
        value = self.const(value)
        if not isinstance(value, (int, float, bool)):
            raise self.unsupported(f"fill value {value!r} is not a number")
        dtype = self.const(dtype) if dtype is not None else x.dtype
        if dtype not in FLOAT_DTYPES:
            raise self.unsupported(f"a *_like of dtype {dtype} has no template (floating point only)")
        return self.ew("masked_fill", x, 1.0, float(value), dtype=dtype)

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
        if isinstance(dim, _Val) and (dim.tensor or dim.params.get("scalar_tensor")):
            return self.ew("maximum" if kind == "max" else "minimum", input, dim)
        if dim is None:
            return self.red(kind, input, None, False)
        return _Pair(self.red(kind, input, dim, keepdim), self.here(), self.node)

    def _arg(self, kind: str, input: Any, dim: Any, keepdim: Any) -> _Val:
        if self.const(dim) is None:
            raise self.unsupported(f"{kind} over the flattened tensor (dim=None) has no template")
        if not isinstance(self.const(dim), int):
            raise self.unsupported(f"{kind} over several dims has no template")
        return self.red(kind, input, dim, keepdim, dtype=torch.int64)

    def op_argmax(self, input, dim=None, keepdim=False): return self._arg("argmax", input, dim, keepdim)
    def op_argmin(self, input, dim=None, keepdim=False): return self._arg("argmin", input, dim, keepdim)

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

    def op_norm(self, input, p="fro", dim=None, keepdim=False, out=None, dtype=None):
        """Vector norms over given dims (L2Norm's `x / x.norm(p=2, dim=1, keepdim=True)`) or over the whole tensor
        (FrobeniusNorm's `x / torch.norm(x, p='fro')`: a split reduction to one value, the division its own
        kernel, as the fuser ends a reduction of everything before a full-size op)."""
        p, dim = self.const(p), self.const(dim)
        if dim == () or dim == []:
            dim = None
        x = self._cast(input, dtype)
        if p in ("fro", 2, 2.0):
            return self.ew("sqrt", self.red("sum", self.ew("mul", x, x), dim, keepdim))
        if p in (1, 1.0):
            return self.red("sum", self.ew("abs", x), dim, keepdim)
        if p == float("inf"):
            return self.red("max", self.ew("abs", x), dim, keepdim)
        raise self.unsupported(f"norm with p={p!r} has no template")

    # -- losses, as KernelBench writes them: pointwise terms, then the reduction (a split one: few rows)
    def _reduced(self, pointwise: _Val, reduction: Any, batch: _Val | None = None) -> _Val:
        reduction = self.const(reduction)
        if reduction == "none":
            return pointwise
        if reduction == "sum":
            return self.red("sum", pointwise, None, False)
        if reduction == "mean":
            return self.red("mean", pointwise, None, False)
        if reduction == "batchmean" and batch is not None and batch.shape:
            return self.ew("div", self.red("sum", pointwise, None, False), float(batch.shape[0]))
        raise self.unsupported(f"reduction={reduction!r} has no template")

    def op_smooth_l1_loss(self, input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
        beta = float(self.const(beta))
        d = self.ew("abs", self.ew("sub", input, target))
        if beta == 0.0:
            return self._reduced(d, reduction)
        quad = self.ew("mul", self.ew("mul", d, d), 0.5 / beta)
        return self._reduced(self.ew("where", self._compare("lt", d, beta), quad, self.ew("sub", d, 0.5 * beta)),
                             reduction)

    def op_huber_loss(self, input, target, reduction="mean", delta=1.0, weight=None):
        if weight is not None:
            raise self.unsupported("huber_loss with weights has no template")
        delta = float(self.const(delta))
        d = self.ew("abs", self.ew("sub", input, target))
        quad = self.ew("mul", self.ew("mul", d, d), 0.5)
        lin = self.ew("mul", self.ew("sub", d, 0.5 * delta), delta)
        return self._reduced(self.ew("where", self._compare("lt", d, delta), quad, lin), reduction)

    def op_mse_loss(self, input, target, size_average=None, reduce=None, reduction="mean", weight=None):
        if weight is not None:
            raise self.unsupported("mse_loss with weights has no template")
        d = self.ew("sub", input, target)
        return self._reduced(self.ew("mul", d, d), reduction)

    def op_l1_loss(self, input, target, size_average=None, reduce=None, reduction="mean"):
        return self._reduced(self.ew("abs", self.ew("sub", input, target)), reduction)

    def op_kl_div(self, input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
        if self.const(log_target):
            pointwise = self.ew("mul", self.ew("exp", target), self.ew("sub", target, input))
        else:  # torch: xlogy(target, target) - target * input (0 where target is 0)
            xlogy = self.ew("where", self._compare("eq", target, 0.0), 0.0,
                            self.ew("mul", target, self.ew("log", target)))
            pointwise = self.ew("sub", xlogy, self.ew("mul", target, input))
        return self._reduced(pointwise, reduction, batch=input)

    def op_pairwise_distance(self, x1, x2, p=2.0, eps=1e-6, keepdim=False):
        p = float(self.const(p))
        if p != 2.0:
            raise self.unsupported(f"pairwise_distance with p={p} has no template")
        d = self.ew("add", self.ew("sub", x1, x2), float(self.const(eps)))
        return self.ew("sqrt", self.red("sum", self.ew("mul", d, d), -1, self.const(keepdim)))

    def op_triplet_margin_loss(self, anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                               size_average=None, reduce=None, reduction="mean"):
        if self.const(swap):
            raise self.unsupported("triplet_margin_loss with swap=True has no template")
        dp = self.op_pairwise_distance(anchor, positive, p, eps)
        dn = self.op_pairwise_distance(anchor, negative, p, eps)
        loss = self.ew("maximum", self.ew("add", self.ew("sub", dp, dn), float(self.const(margin))), 0.0)
        return self._reduced(loss, reduction)

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

    def op_einsum(self, equation, *operands):
        """The einsums that are one matmul (KernelBench 11's "bijl,lk->bijk"): `P c, c n -> P n` (or `n c`: read
        transposed in place, as nn.Linear's weight) and the batched `Q i c, Q c n -> Q i n`. Others are refused
        by form (lenient: torch's call)."""
        eq = str(self.const(equation)).replace(" ", "")
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = tuple(operands[0])
        if "->" not in eq or "." in eq or len(operands) != 2:
            raise self.unsupported(f"einsum {eq!r}: only two operands and an explicit output have a template")
        ins, out = eq.split("->")
        a, b = ins.split(",") if ins.count(",") == 1 else ("", "")
        if not a or any(len(set(t)) != len(t) for t in (a, b, out)):
            raise self.unsupported(f"einsum {eq!r}: repeated indices have no template")
        contracted = (set(a) & set(b)) - set(out)
        if len(contracted) == 1 and a[-1] in contracted:
            c, lead = a[-1], a[:-1]
            if len(b) == 2 and c in b and out == lead + b.replace(c, ""):
                return self.mm(operands[0], operands[1], linear=b[1] == c)
            q = lead[:-1]
            if q and b == q + c + out[-1] and out == lead + out[-1]:
                return self.mm(operands[0], operands[1], linear=False)
        raise self.unsupported(f"einsum {eq!r}: only the forms that are one matmul have a template")

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

    def mod_SmoothL1Loss(self, mod, path, input, target):
        return self.op_smooth_l1_loss(input, target, reduction=mod.reduction, beta=mod.beta)

    def mod_HuberLoss(self, mod, path, input, target):
        return self.op_huber_loss(input, target, reduction=mod.reduction, delta=mod.delta)

    def mod_MSELoss(self, mod, path, input, target): return self.op_mse_loss(input, target, reduction=mod.reduction)
    def mod_L1Loss(self, mod, path, input, target): return self.op_l1_loss(input, target, reduction=mod.reduction)

    def mod_KLDivLoss(self, mod, path, input, target):
        return self.op_kl_div(input, target, reduction=mod.reduction, log_target=mod.log_target)

    def mod_TripletMarginLoss(self, mod, path, anchor, positive, negative):
        return self.op_triplet_margin_loss(anchor, positive, negative, margin=mod.margin, p=mod.p, eps=mod.eps,
                                           swap=mod.swap, reduction=mod.reduction)

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


def _leaves_of(obj: Any) -> list[Any]:
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return [x for o in obj for x in _leaves_of(o)]
    if isinstance(obj, dict):
        return [x for o in obj.values() for x in _leaves_of(o)]
    return [obj]


def _live_vals(outputs: Any) -> set[_Val]:
    live: set[_Val] = set()
    stack = _flat(outputs)
    while stack:
        v = stack.pop()
        if v not in live:
            live.add(v)
            stack += _flat(v.args)
    return live


def _replace_vals(obj: Any, new: dict[_Val, _Val]) -> Any:
    if isinstance(obj, _Val):
        return new.get(obj, obj)
    if isinstance(obj, (list, tuple)) and not isinstance(obj, torch.Size):
        return type(obj)(_replace_vals(o, new) for o in obj)
    if isinstance(obj, dict):
        return {k: _replace_vals(o, new) for k, o in obj.items()}
    return obj


# Namespaces whose functions an extern writes as `<prefix>.<name>` (the program imports torch).
# einops' functions, recorded as calls by the tracer (`trace._einops_functions`): under lenient they stay calls.
EINOPS_FUNCTIONS = ("rearrange", "reduce", "repeat", "einsum", "pack", "unpack")
_EXTERN_NAMESPACES = {
    "torch": "torch", "torch.functional": "torch", "torch._C._VariableFunctions": "torch",
    "torch.nn.functional": "torch.nn.functional", "torch._C._nn": "torch.nn.functional",
    "torch.special": "torch.special", "torch._C._special": "torch.special", "torch.linalg": "torch.linalg",
    "torch._C._linalg": "torch.linalg", "torch.fft": "torch.fft", "torch._C._fft": "torch.fft",
}


def _function_call(fn: Any, pos: list[str], kw: list[str]) -> str | None:
    """Python source calling `fn` (a torch function, an operator, a builtin), or None when it has no name
    the generated program can reach."""
    mod, name = getattr(fn, "__module__", None) or "", getattr(fn, "__name__", None)
    if not name:
        return None
    if mod in ("_operator", "operator"):
        base = name[1:] if name.startswith("i") and name[1:] in _PY_OPS else name
        if base in _PY_OPS and len(pos) == 2 and not kw:
            return f"({pos[0]} {_PY_OPS[base]} {pos[1]})"
        if name == "getitem" and len(pos) == 2:
            return f"{pos[0]}[{pos[1]}]"
        if name in ("neg", "pos", "invert", "not_") and len(pos) == 1:
            return f"({ {'neg': '-', 'pos': '+', 'invert': '~', 'not_': 'not '}[name]}{pos[0]})"
        if name in ("matmul", "and_", "or_", "xor", "lshift", "rshift") and len(pos) == 2:
            op = {"matmul": "@", "and_": "&", "or_": "|", "xor": "^", "lshift": "<<", "rshift": ">>"}[name]
            return f"({pos[0]} {op} {pos[1]})"
        return None
    if mod == "math" and isinstance(getattr(math, name, None), type(math.sqrt)):
        return f"math.{name}({', '.join(pos + kw)})"  # the program imports math
    if mod == "builtins":
        return f"{name}({', '.join(pos + kw)})" if name in ("getattr", "len", "min", "max", "abs", "int", "float",
                                                             "sum", "round", "tuple", "list") else None
    if mod.split(".")[0] == "einops" and name in EINOPS_FUNCTIONS:
        return f"einops.{name}({', '.join(pos + kw)})"  # the program imports einops (emit)
    prefix = _EXTERN_NAMESPACES.get(mod)
    if prefix is None:
        return None
    obj: Any = torch
    for part in prefix.split(".")[1:] + [name]:
        obj = getattr(obj, part, None)
    if obj is None:
        return None
    return f"{prefix}.{name}({', '.join(pos + kw)})"


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
