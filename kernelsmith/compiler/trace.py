"""Tracing: the task's `Model` built (on the meta device when it can be), traced by torch.fx with each node's
line of the task file, operators no template covers refused before any shape is propagated (strict), and every
node's value recorded by running the graph on meta tensors (or small real CPU tensors when an op needs data)."""

from __future__ import annotations

import ast
import sys
import threading
from typing import Any

import torch
import torch.fx as fx

from kernelsmith import pyast
from kernelsmith.compiler.emit import _forward_signature
from kernelsmith.compiler.ir import (
    _SKIP,
    SeedUnsupported,
    _at,
    _AttrRef,
    _describe,
    _exc_line,
    _first_line,
    _node_line,
)
from kernelsmith.compiler.lower import _known

# What torch.fx's failures mean for a KernelBench forward, in words.
_TRACE_WHY = (
    ("cannot be used as inputs to control flow", "Model.forward branches on a tensor's value (if/while on data)"),
    ("cannot be interpreted as an integer", "Model.forward uses a tensor's size or value as a Python int "
                                           "(range(), a loop count)"),
    ("slice indices must be integers", "Model.forward slices with a tensor's size or value as a Python int"),
    ("cannot be iterated", "Model.forward iterates over a tensor or a size in Python"),
    ("unknown to einops", "Model.forward calls einops (rearrange, reduce, ...), which torch.fx cannot follow"),
)

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


_FACTORIES = ("ones", "zeros", "empty", "full", "arange", "eye", "rand", "randn", "linspace", "tril_indices",
              "triu_indices")
_ORIGINAL_FACTORIES = {name: getattr(torch, name) for name in _FACTORIES}
_FACTORY_LOCK = threading.RLock()

_PY_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.get_default_dtype(), complex: torch.complex64}


def _einops_functions() -> tuple[Any, ...]:
    """einops' functions, where einops is installed: fx records a call to them as one node (their pattern
    strings are constants) instead of following them into code that rejects a Proxy. Under lenient the node stays
    that call in the generated forward; strict refuses it by name."""
    try:
        import einops
    except ImportError:
        return ()
    from kernelsmith.compiler.lower import EINOPS_FUNCTIONS

    return tuple(f for name in EINOPS_FUNCTIONS if callable(f := getattr(einops, name, None)))


class _LineTracer(fx.Tracer):
    """fx's tracer, noting in each node the task file's line that made it (the innermost frame of that file),
    so messages name it. fx's own `record_stack_traces` costs ~1.5 s of imports on its first use. Buffers are
    graph inputs like parameters (`self.mask[:, :T]` with a traced T slices a get_attr node, instead of failing
    on a plain tensor), read from `self` at run time."""

    proxy_buffer_attributes = True
    trace_asserts = True  # `assert H == self.img_size[0]` becomes a guard node (removed), not a refusal

    def __init__(self, filename: str):
        super().__init__(autowrap_functions=_einops_functions())
        self.filename = filename

    def trace(self, root: Any, concrete_args: dict | None = None) -> fx.Graph:
        """fx's trace, with torch's factories recorded as calls when a size or device is traced (`torch.ones(T, T,
        device=x.device)`, `T = x.size(-1)`): fx gives a factory no Proxy dispatch, so it would fail on them."""
        with _FACTORY_LOCK:  # the patch is process-wide: one trace at a time, torch's own functions restored
            try:
                for name, fn in _ORIGINAL_FACTORIES.items():
                    setattr(torch, name, self._factory(fn))
                return super().trace(root, concrete_args)
            finally:
                for name, fn in _ORIGINAL_FACTORIES.items():
                    setattr(torch, name, fn)

    def _factory(self, fn: Any) -> Any:
        def factory(*args: Any, **kwargs: Any) -> Any:
            if any(isinstance(a, fx.Proxy) for a in _leaves([*args, *kwargs.values()])):
                if kwargs.get("dtype") in _PY_DTYPES:  # `dtype=bool`: a Python type is no graph argument
                    kwargs = {**kwargs, "dtype": _PY_DTYPES[kwargs["dtype"]]}
                return self.create_proxy("call_function", fn, args, kwargs)
            return fn(*args, **kwargs)
        return factory

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
           filename: str = "<task>", task_source: str = "", refuse_unknown: bool = True,
           ) -> tuple[fx.GraphModule, torch.nn.Module]:
    """Trace `Model(*init_inputs)`, refuse what no template covers (`refuse_unknown`: strict; under lenient
    such operators stay torch calls), and record every node's value;
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
        if refuse_unknown:
            _refuse_unknown(gm, model, filename)
        for node in list(gm.graph.nodes):  # the guards fx adds for specialised arguments
            if node.op == "call_function" and getattr(node.target, "__name__", "") in _SKIP:
                gm.graph.erase_node(node)
        gm.graph.eliminate_dead_code()
        return gm, model

    def retrace() -> fx.GraphModule:
        return _symbolic_trace(model, concrete or None, filename)

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
