"""A subgraph as data (a *spec*) and the one renderer that turns it into a KernelBench task file.

The sandboxed worker builds specs from the model's run and the orchestrator renders the files, so the child
never hands over code: every name is checked against an identifier pattern and a namespace rule, every value is
a literal rendered with `repr`, and anything else raises `SpecError`. The same `render_code` runs in the child
(to check the task against the model) and in the orchestrator (to write it): the digest of the two must agree.

A spec (JSON):
    {"name": "linear_relu",
     "inputs":  [{"name": "x", "shape": [8, 64], "dtype": "float32", "low": -3.1, "high": 2.9}],
     "modules": [{"attr": "fc1", "cls": "Linear", "kwargs": {"in_features": 64, "out_features": 128}}],
     "tensors": [{"attr": "mask", "kind": "buffer", "shape": [1, 1, 8, 8], "dtype": "float32",
                  "init": {"kind": "tril", "value": 1.0, "diagonal": 0}}],
     "body":    [{"out": "v1", "op": "module", "target": "fc1", "args": [{"ref": "x"}], "kwargs": {}},
                 {"out": "v2", "op": "function", "target": "torch.relu", "args": [{"ref": "v1"}], "kwargs": {}}],
     "outputs": ["v2"]}
Encoded values: JSON null/bool/int/str/list; floats (non-finite as {"float": "inf"}); {"ref": NAME} (a variable),
{"attr": NAME} (`self.NAME`), {"tuple": [...]}, {"dtype": NAME}, {"slice": [a, b, c]}, {"ellipsis": true},
{"memory_format": NAME}.
"""

from __future__ import annotations

import hashlib
import keyword
import math
import re
from typing import Any

IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,79}$")
DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "complex64", "complex128")
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
MEMORY_FORMATS = ("contiguous_format", "channels_last", "channels_last_3d", "preserve_format")
# Names the rendered code itself uses: a variable or attribute may not shadow them.
RESERVED = {"self", "torch", "nn", "F", "math", "operator", "Model", "get_inputs", "get_init_inputs", "super",
            "getattr", "slice", "range", "len", "print", "open", "exec", "eval", "object", "type"}
# torch / torch.nn.functional names that reach beyond computing on tensors: never rendered.
DENIED = {"save", "load", "compile", "hub", "from_file", "set_default_device", "set_default_dtype", "manual_seed",
          "seed", "set_rng_state", "use_deterministic_algorithms", "set_num_threads", "set_num_interop_threads",
          "set_printoptions", "jit", "export", "library", "ops", "classes", "utils", "backends", "cuda",
          "distributed", "multiprocessing", "autograd", "onnx", "package", "profiler", "testing", "storage",
          "untyped_storage", "data_ptr", "numpy", "tolist", "register_hook", "backward", "share_memory_",
          "pin_memory", "record_stream", "set_", "resize_", "apply_", "map_", "map2_", "tensor", "as_tensor",
          "from_numpy", "frombuffer", "asarray", "set_grad_enabled", "inference_mode", "no_grad", "enable_grad"}
NAMESPACES = ("torch", "F", "operator", "math", "builtins")
GETATTR_OK = {"T", "mT", "H", "mH", "real", "imag", "shape", "dtype", "ndim"}
INFIX = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%", "pow": "**",
         "matmul": "@", "and_": "&", "or_": "|", "xor": "^", "lshift": "<<", "rshift": ">>", "eq": "==",
         "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
PREFIX = {"neg": "-", "pos": "+", "invert": "~"}
MAX_RANK, MAX_DIM, MAX_NODES, MAX_VALUES = 8, 1 << 31, 2000, 4096


class SpecError(ValueError):
    """A spec that cannot be rendered: the message says which field and why."""


def _ident(name: Any, what: str) -> str:
    if not isinstance(name, str) or not IDENT.match(name) or keyword.iskeyword(name) or name in RESERVED:
        raise SpecError(f"{what}: {name!r} is not a usable Python name")
    return name


def _int(v: Any, what: str, lo: int = -MAX_DIM, hi: int = MAX_DIM) -> int:
    if type(v) is not int or not lo <= v <= hi:
        raise SpecError(f"{what}: {v!r} is not an integer in [{lo}, {hi}]")
    return v


def _float(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise SpecError(f"{what}: {v!r} is not a finite number")
    return float(v)


def _dtype(v: Any, what: str) -> str:
    if v not in DTYPES:
        raise SpecError(f"{what}: unknown dtype {v!r}")
    return f"torch.{v}"


def _shape(v: Any, what: str) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) > MAX_RANK:
        raise SpecError(f"{what}: a shape is a list of at most {MAX_RANK} sizes")
    return tuple(_int(s, what, 0) for s in v)


def literal(v: Any, names: set[str], attrs: set[str], what: str, depth: int = 0) -> str:
    """Python text for one encoded value; references must name a variable (`names`) or attribute (`attrs`)."""
    if depth > 8:
        raise SpecError(f"{what}: value nested too deeply")
    if v is None or isinstance(v, (bool, str)):
        return repr(v)
    if isinstance(v, int):
        return repr(v)
    if isinstance(v, float):
        return repr(_float(v, what))
    if isinstance(v, list):
        if len(v) > MAX_VALUES:
            raise SpecError(f"{what}: list of {len(v)} values")
        return "[" + ", ".join(literal(x, names, attrs, what, depth + 1) for x in v) + "]"
    if not isinstance(v, dict) or len(v) != 1:
        raise SpecError(f"{what}: cannot encode {type(v).__name__}")
    (tag, x), = v.items()
    if tag == "ref":
        if x not in names:
            raise SpecError(f"{what}: {x!r} is used before it is defined")
        return str(x)
    if tag == "attr":
        if x not in attrs:
            raise SpecError(f"{what}: self.{x} is not a declared module or tensor")
        return f"self.{x}"
    if tag == "tuple":
        if not isinstance(x, list) or len(x) > MAX_VALUES:
            raise SpecError(f"{what}: bad tuple")
        items = [literal(e, names, attrs, what, depth + 1) for e in x]
        return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
    if tag == "float":
        if x not in ("inf", "-inf", "nan"):
            raise SpecError(f"{what}: bad float {x!r}")
        return f"float({x!r})"
    if tag == "dtype":
        return _dtype(x, what)
    if tag == "memory_format":
        if x not in MEMORY_FORMATS:
            raise SpecError(f"{what}: unknown memory format {x!r}")
        return f"torch.{x}"
    if tag == "ellipsis":
        return "..."
    if tag == "slice":
        if not isinstance(x, list) or len(x) != 3:
            raise SpecError(f"{what}: a slice has three parts")
        return "slice(" + ", ".join(literal(e, names, attrs, what, depth + 1) for e in x) + ")"
    raise SpecError(f"{what}: unknown value tag {tag!r}")


def _index(v: Any, names: set[str], attrs: set[str], what: str) -> str:
    """A subscript as Python writes it: `x[:, :, :8]` rather than `x[(slice(None, None, None), ...)]`."""
    def one(e: Any) -> str:
        if isinstance(e, dict) and set(e) == {"slice"} and isinstance(e["slice"], list) and len(e["slice"]) == 3:
            parts = ["" if p is None else literal(p, names, attrs, what) for p in e["slice"]]
            return f"{parts[0]}:{parts[1]}" + (f":{parts[2]}" if parts[2] else "")
        return literal(e, names, attrs, what)

    if isinstance(v, dict) and set(v) == {"tuple"} and isinstance(v["tuple"], list) and v["tuple"]:
        return ", ".join(one(e) for e in v["tuple"])
    return one(v)


def _call(step: dict[str, Any], names: set[str], attrs: set[str], modules: set[str], where: str) -> str:
    op, target = step.get("op"), step.get("target")
    args, kwargs = step.get("args", []), step.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise SpecError(f"{where}: args must be a list and kwargs an object")
    a = [literal(x, names, attrs, where) for x in args]
    kw = [f"{_ident(k, where)}={literal(x, names, attrs, where)}" for k, x in kwargs.items()]
    if op == "module":
        if target not in modules:
            raise SpecError(f"{where}: self.{target} is not a declared module")
        return f"self.{target}({', '.join(a + kw)})"
    if op == "method":
        name = _ident(target, where)
        if name.startswith("_") or name in DENIED or not a:
            raise SpecError(f"{where}: method {name!r} is not rendered")
        return f"{a[0]}.{name}({', '.join(a[1:] + kw)})"
    if op != "function" or not isinstance(target, str) or "." not in target:
        raise SpecError(f"{where}: unknown step {op!r} {target!r}")
    ns, _, name = target.rpartition(".")
    if ns not in NAMESPACES or not IDENT.match(name) or name.startswith("_") or name in DENIED:
        raise SpecError(f"{where}: function {target!r} is not rendered (torch, F, operator and math only)")
    if ns == "builtins":
        if name != "getattr" or len(args) != 2 or kw or args[1] not in GETATTR_OK:
            raise SpecError(f"{where}: only getattr(tensor, {sorted(GETATTR_OK)}) is rendered")
        return f"{a[0]}.{args[1]}"
    if ns == "operator" and not kw:
        if name in INFIX and len(a) == 2:
            return f"({a[0]} {INFIX[name]} {a[1]})"
        if name in PREFIX and len(a) == 1:
            return f"({PREFIX[name]}{a[0]})"
        if name == "getitem" and len(a) == 2:
            return f"{a[0]}[{_index(args[1], names, attrs, where)}]"
    return f"{ns}.{name}({', '.join(a + kw)})"


def _init_tensor(t: dict[str, Any], where: str) -> str:
    shape = _shape(t.get("shape"), where)
    dtype = _dtype(t.get("dtype"), where)
    init = t.get("init")
    if not isinstance(init, dict):
        raise SpecError(f"{where}: no init")
    kind = init.get("kind")
    if kind == "randn":
        if t["dtype"] not in FLOAT_DTYPES:
            raise SpecError(f"{where}: randn init needs a float dtype")
        return f"torch.randn({shape!r}, dtype={dtype}) * {_float(init.get('std'), where)!r}"
    if kind == "fill":
        return f"torch.full({shape!r}, {_float(init.get('value'), where)!r}, dtype={dtype})"
    if kind in ("tril", "triu"):
        diag = _int(init.get("diagonal"), where)
        return f"torch.{kind}(torch.full({shape!r}, {_float(init.get('value'), where)!r}, dtype={dtype}), {diag})"
    if kind == "values":
        values = init.get("values")
        if not isinstance(values, list) or len(values) != math.prod(shape) or len(values) > MAX_VALUES:
            raise SpecError(f"{where}: values do not fill the shape")
        text = ", ".join(repr(_float(v, where)) for v in values)
        return f"torch.tensor([{text}], dtype={dtype}).reshape({shape!r})"
    raise SpecError(f"{where}: unknown init {kind!r}")


def _input(inp: dict[str, Any], where: str) -> str:
    shape = _shape(inp.get("shape"), where)
    name = inp.get("dtype")
    dtype = _dtype(name, where)
    if name == "bool":
        return f"torch.rand({shape!r}) < 0.5"
    if name in FLOAT_DTYPES:
        lo = inp.get("low")
        if lo is not None and _float(lo, where) >= 0:  # a positive input (a log's argument, a scale) stays so
            return f"torch.rand({shape!r}, dtype={dtype})"
        return f"torch.randn({shape!r}, dtype={dtype})"
    if name.startswith(("int", "uint")):
        lo = _int(inp.get("low", 0), where)
        hi = _int(inp.get("high", lo + 1), where)
        return f"torch.randint({lo}, {max(hi, lo + 1)}, {shape!r}, dtype={dtype})"
    raise SpecError(f"{where}: inputs of dtype {name} are not generated")


def render_code(spec: dict[str, Any]) -> str:
    """The task's code (everything but the header comment), or `SpecError` naming what is wrong."""
    if not isinstance(spec, dict):
        raise SpecError("spec: not an object")
    mods, tens, body = spec.get("modules", []), spec.get("tensors", []), spec.get("body", [])
    inputs, outputs = spec.get("inputs", []), spec.get("outputs", [])
    if not all(isinstance(x, list) for x in (mods, tens, body, inputs, outputs)):
        raise SpecError("spec: modules, tensors, body, inputs and outputs are lists")
    if not body or len(body) > MAX_NODES or not outputs:
        raise SpecError(f"spec: {len(body)} steps and {len(outputs)} outputs")
    init_lines: list[str] = []
    modules: set[str] = set()
    attrs: set[str] = set()
    for i, m in enumerate(mods):
        where = f"modules[{i}]"
        if not isinstance(m, dict) or not isinstance(m.get("kwargs", {}), dict):
            raise SpecError(f"{where}: not an object")
        attr, cls = _ident(m.get("attr"), where), _ident(m.get("cls"), where)
        if attr in attrs or not cls[0].isupper():
            raise SpecError(f"{where}: duplicate attribute or not an nn class: {attr} = nn.{cls}")
        kw = ", ".join(f"{_ident(k, where)}={literal(v, set(), set(), where)}" for k, v in m.get("kwargs", {}).items())
        init_lines.append(f"self.{attr} = nn.{cls}({kw})")
        modules.add(attr)
        attrs.add(attr)
    for i, t in enumerate(tens):
        where = f"tensors[{i}]"
        if not isinstance(t, dict):
            raise SpecError(f"{where}: not an object")
        attr = _ident(t.get("attr"), where)
        if attr in attrs:
            raise SpecError(f"{where}: duplicate attribute {attr}")
        value = _init_tensor(t, where)
        if t.get("kind") == "parameter":
            init_lines.append(f"self.{attr} = nn.Parameter({value})")
        elif t.get("kind") == "buffer":
            init_lines.append(f"self.register_buffer({attr!r}, {value})")
        else:
            raise SpecError(f"{where}: kind is parameter or buffer")
        attrs.add(attr)
    names: set[str] = set()
    params, gens = [], []
    for i, inp in enumerate(inputs):
        where = f"inputs[{i}]"
        if not isinstance(inp, dict):
            raise SpecError(f"{where}: not an object")
        name = _ident(inp.get("name"), where)
        if name in names:
            raise SpecError(f"{where}: duplicate name {name}")
        names.add(name)
        params.append(name)
        gens.append(_input(inp, where))
    lines = []
    for i, step in enumerate(body):
        where = f"body[{i}]"
        if not isinstance(step, dict):
            raise SpecError(f"{where}: not an object")
        out = _ident(step.get("out"), where)
        if out in names:
            raise SpecError(f"{where}: {out} assigned twice")
        lines.append(f"{out} = {_call(step, names, attrs, modules, where)}")
        names.add(out)
    rets = [literal({"ref": o}, names, attrs, "outputs") for o in outputs]
    ret = rets[0] if len(rets) == 1 else "(" + ", ".join(rets) + ")"
    init_body = "\n".join(f"        {ln}" for ln in ["super().__init__()", *init_lines])
    fwd = "\n".join(f"        {ln}" for ln in [*lines, f"return {ret}"])
    inputs_text = ",\n".join(f"        {g}" for g in gens)
    return (
        "import math\nimport operator\n\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
        "class Model(nn.Module):\n"
        f"    def __init__(self):\n{init_body}\n\n"
        f"    def forward(self, {', '.join(params)}):\n{fwd}\n\n\n"
        f"def get_inputs():\n    return [\n{inputs_text},\n    ]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )


def digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def header(lines: list[str]) -> str:
    """Comment lines for the top of a task file (control characters removed: a comment stays one line)."""
    return "".join("# " + re.sub(r"[\x00-\x1f\x7f]", " ", ln)[:200] + "\n" for ln in lines)
