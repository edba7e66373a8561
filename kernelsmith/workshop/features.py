"""Static features of a candidate, read from its source with `ast` (never executed): the archive's grid axes.

`kernel_features(source)` returns a JSON-serialisable dict, deterministic for a given source:

    parse_error       True when the source does not parse (then every count below is 0/empty and `error` says why)
    n_kernels         functions decorated with `@triton.jit` (also `@jit`, `@triton.jit(...)`, under autotune)
    kernels           their names, sorted
    uses_dot          a `tl.dot` call inside a kernel
    uses_atomics      a `tl.atomic_*` call inside a kernel
    n_loads/n_stores  `tl.load` / `tl.store` calls inside kernels
    n_loops           `for`/`while` loops inside kernels
    n_launch_sites    `kernel[grid](...)` calls of the file's own kernels
    launch_constexprs {constexpr parameter: sorted values seen}: launch-site arguments bound to a kernel's
                      `tl.constexpr` parameters, and `triton.Config({...})` entries, resolved statically
                      (literals, module/class constants, `self.X`, local assignments, `a if c else b`, small
                      arithmetic, helper functions returning constants)
    tile_sizes        sorted distinct integer values of constexprs whose name contains BLOCK or TILE
    dynamic_tiles     sorted BLOCK/TILE constexpr names with at least one value that is not static
    num_warps         sorted distinct `num_warps` values (launch sites and `triton.Config`)
    num_stages        sorted distinct `num_stages` values
    n_autotune_configs `triton.Config(...)` calls
    tl_ops            sorted distinct `tl.*` calls across kernels
    fusion            distinct compute `tl.*` calls (plumbing such as load/store/arange excluded) in the largest
                      kernel: a proxy for how much work one kernel fuses
    ast_nodes         AST node count of the EVOLVE-BLOCK (the whole file when it has none): the complexity
    complexity        = ast_nodes
    lines             non-blank, non-comment lines of the EVOLVE-BLOCK
"""

from __future__ import annotations

import ast
import itertools
from typing import Any

from kernelsmith import pyast
from kernelsmith.candidate import Candidate

# `tl.*` calls that move data or compute indices rather than doing the kernel's arithmetic.
PLUMBING = frozenset({
    "program_id", "num_programs", "arange", "load", "store", "zeros", "zeros_like", "full", "full_like", "cdiv",
    "constexpr", "multiple_of", "max_contiguous", "max_constancy", "static_assert", "static_print",
    "device_print", "device_assert", "make_block_ptr", "advance", "range", "static_range", "debug_barrier",
    "assume", "make_tensor_descriptor", "load_tensor_descriptor", "store_tensor_descriptor",
})
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_MAX_VALUES = 16  # cap on the combinations one expression may resolve to
_MAX_DEPTH = 8


def _empty(parse_error: bool = False, error: str = "") -> dict[str, Any]:
    d: dict[str, Any] = {
        "parse_error": parse_error,
        "n_kernels": 0,
        "kernels": [],
        "uses_dot": False,
        "uses_atomics": False,
        "n_loads": 0,
        "n_stores": 0,
        "n_loops": 0,
        "n_launch_sites": 0,
        "launch_constexprs": {},
        "tile_sizes": [],
        "dynamic_tiles": [],
        "num_warps": [],
        "num_stages": [],
        "n_autotune_configs": 0,
        "tl_ops": [],
        "fusion": 0,
        "ast_nodes": 0,
        "complexity": 0,
        "lines": 0,
    }
    if error:
        d["error"] = error
    return d


def _count_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.strip() and not line.strip().startswith("#"))


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _sortable(values: set[Any]) -> list[Any]:
    return sorted(values, key=lambda v: (type(v).__name__, v))


class TritonModule:
    """Module-level facts: aliases, constants, classes, functions, kernels (shared with `offline/mutate.py`)."""

    def __init__(self, tree: ast.Module):
        self.tl_aliases = {"tl"}
        self.triton_aliases = {"triton"}
        self.jit_names = {"jit"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "triton.language" and a.asname:
                        self.tl_aliases.add(a.asname)
                    elif a.name == "triton":
                        self.triton_aliases.add(a.asname or "triton")
            elif isinstance(node, ast.ImportFrom) and node.module == "triton":
                for a in node.names:
                    if a.name == "language":
                        self.tl_aliases.add(a.asname or "language")
                    elif a.name == "jit":
                        self.jit_names.add(a.asname or "jit")
        self.consts: dict[str, list[ast.expr]] = {}
        self.functions: dict[str, ast.FunctionDef] = {}
        self.class_consts: dict[str, dict[str, list[ast.expr]]] = {}
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[node.name] = node  # type: ignore[assignment]
            elif isinstance(node, ast.ClassDef):
                attrs: dict[str, list[ast.expr]] = {}
                for item in node.body:
                    _collect_assign(item, attrs)
                self.class_consts[node.name] = attrs
            else:
                _collect_assign(node, self.consts)
        self.kernels = {
            name: f for name, f in self.functions.items() if any(self.is_jit(d) for d in f.decorator_list)
        }

    def is_jit(self, dec: ast.expr) -> bool:
        if isinstance(dec, ast.Call):
            dec = dec.func
        name = _dotted(dec)
        if name is None:
            return False
        head, _, last = name.rpartition(".")
        return (not head and last in self.jit_names) or (last == "jit" and head in self.triton_aliases)

    def tl_name(self, call: ast.Call) -> str | None:
        """`tl.dot(...)` -> "dot", `tl.math.exp(...)` -> "math.exp"; None for anything else."""
        name = _dotted(call.func)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        return rest if head in self.tl_aliases and rest else None

    def is_config(self, call: ast.Call) -> bool:
        name = _dotted(call.func)
        if name is None:
            return False
        head, _, last = name.rpartition(".")
        return last == "Config" and (head in self.triton_aliases or not head)


def _collect_assign(node: ast.AST, into: dict[str, list[ast.expr]]) -> None:
    if isinstance(node, ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Name):
                into.setdefault(t.id, []).append(node.value)
            elif isinstance(t, (ast.Tuple, ast.List)):
                for e in t.elts:
                    if isinstance(e, ast.Name):
                        into.setdefault(e.id, []).append(ast.Name("<dynamic>"))
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        into.setdefault(node.target.id, []).append(node.value)
    elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        into.setdefault(node.target.id, []).append(ast.Name("<dynamic>"))


def _local_assigns(fn: ast.AST) -> dict[str, list[ast.expr]]:
    out: dict[str, list[ast.expr]] = {}
    args = getattr(fn, "args", None)
    if isinstance(args, ast.arguments):
        for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if a is not None:
                out.setdefault(a.arg, []).append(ast.Name("<dynamic>"))
    for node in ast.walk(fn):
        _collect_assign(node, out)
        if isinstance(node, (ast.For, ast.comprehension)):
            for t in ast.walk(node.target):
                if isinstance(t, ast.Name):
                    out.setdefault(t.id, []).append(ast.Name("<dynamic>"))
        elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
            out.setdefault(node.target.id, []).append(node.value)
    return out


_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
    ast.Pow: lambda a, b: a**b,
}


class _Resolver:
    """Statically resolves an expression to the set of constant values it may take (and whether that is all)."""

    def __init__(self, mod: TritonModule):
        self.mod = mod
        self._locals: dict[int, dict[str, list[ast.expr]]] = {}

    def locals_of(self, fn: ast.AST | None) -> dict[str, list[ast.expr]]:
        if fn is None:
            return {}
        key = id(fn)
        if key not in self._locals:
            self._locals[key] = _local_assigns(fn)
        return self._locals[key]

    def values(self, e: ast.expr, fn: ast.AST | None, cls: str | None, depth: int = 0) -> tuple[set[Any], bool]:
        if depth > _MAX_DEPTH:
            return set(), False
        if isinstance(e, ast.Constant) and isinstance(e.value, (int, float, str, bool)):
            return {e.value}, True
        if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub):
            vals, ok = self.values(e.operand, fn, cls, depth + 1)
            nums = {-v for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)}
            return nums, ok and len(nums) == len(vals)
        if isinstance(e, ast.IfExp):
            a, ok_a = self.values(e.body, fn, cls, depth + 1)
            b, ok_b = self.values(e.orelse, fn, cls, depth + 1)
            return a | b, ok_a and ok_b
        if isinstance(e, ast.BinOp) and type(e.op) in _BINOPS:
            a, ok_a = self.values(e.left, fn, cls, depth + 1)
            b, ok_b = self.values(e.right, fn, cls, depth + 1)
            out: set[Any] = set()
            ok = ok_a and ok_b
            for x, y in itertools.islice(itertools.product(sorted(a, key=repr), sorted(b, key=repr)), _MAX_VALUES):
                if isinstance(x, int) and isinstance(y, int) and not isinstance(x, bool) and not isinstance(y, bool):
                    try:
                        if isinstance(e.op, ast.Pow) and (y < 0 or y > 64):
                            raise ValueError
                        out.add(_BINOPS[type(e.op)](x, y))
                    except (ArithmeticError, ValueError):
                        ok = False
                else:
                    ok = False
            return out, ok and len(a) * len(b) <= _MAX_VALUES
        if isinstance(e, ast.Name):
            local = self.locals_of(fn)
            if e.id in local:
                return self._union(local[e.id], fn, cls, depth)
            if e.id in self.mod.consts:
                return self._union(self.mod.consts[e.id], None, None, depth)
            return set(), False
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name):
            owner = e.value.id
            if owner in ("self", "cls") and cls is not None:
                owner = cls
            attrs = self.mod.class_consts.get(owner, {})
            if e.attr in attrs:
                return self._union(attrs[e.attr], None, owner, depth)
            return set(), False
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in self.mod.functions:
            helper = self.mod.functions[e.func.id]
            if helper.name in self.mod.kernels:
                return set(), False
            returns = [n.value for n in ast.walk(helper) if isinstance(n, ast.Return)]
            if not returns or any(r is None for r in returns):
                return set(), False
            return self._union(returns, helper, None, depth)  # type: ignore[arg-type]
        return set(), False

    def _union(self, exprs: list[ast.expr], fn: ast.AST | None, cls: str | None, depth: int) -> tuple[set[Any], bool]:
        out: set[Any] = set()
        ok = True
        for x in exprs:
            if isinstance(x, ast.Name) and x.id == "<dynamic>":
                ok = False
                continue
            vals, sub_ok = self.values(x, fn, cls, depth + 1)
            out |= vals
            ok = ok and sub_ok
        return out, ok


def _constexpr_params(fn: ast.FunctionDef) -> list[tuple[int, str]]:
    """(position, name) of the parameters annotated `tl.constexpr` (or `constexpr`)."""
    out = []
    params = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    for i, a in enumerate(params):
        ann = _dotted(a.annotation) if a.annotation is not None else None
        if ann is not None and ann.rpartition(".")[2] == "constexpr":
            out.append((i, a.arg))
    return out


def launch_arguments(call: ast.Call, kernel: ast.FunctionDef | None) -> list[tuple[str, ast.expr]]:
    """(parameter, value) of a launch `kernel[grid](...)`: positional arguments bound to the kernel's
    `tl.constexpr` parameters, then keywords naming a constexpr parameter or a launch option (`num_warps`, ...);
    every keyword when the kernel is not one of the file's own. Shared by the features and the tuner's knobs
    (`offline/mutate.py`), so both read a launch the same way."""
    keywords = [(kw.arg, kw.value) for kw in call.keywords if kw.arg]
    if kernel is None:
        return keywords
    params = _constexpr_params(kernel)
    names = {n for _, n in params}
    positional = len(kernel.args.posonlyargs) + len(kernel.args.args)
    out = [(name, call.args[pos]) for pos, name in params
           if pos < min(positional, len(call.args)) and not any(isinstance(a, ast.Starred) for a in call.args[:pos + 1])]
    return out + [(k, v) for k, v in keywords if k in names or k in LAUNCH_OPTIONS]


def config_entries(call: ast.Call) -> list[tuple[str, ast.expr]]:
    """(name, value) of a `triton.Config({...}, num_warps=..., ...)`: its dict's string keys, then its launch
    options."""
    out: list[tuple[str, ast.expr]] = []
    if call.args and isinstance(call.args[0], ast.Dict):
        out += [(k.value, v) for k, v in zip(call.args[0].keys, call.args[0].values)
                if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return out + [(kw.arg, kw.value) for kw in call.keywords if kw.arg in LAUNCH_OPTIONS]


def _is_tile(name: str) -> bool:
    up = name.upper()
    return "BLOCK" in up or "TILE" in up


def kernel_features(source: str) -> dict[str, Any]:
    """Static features of `source`; never raises: broken code gives `parse_error=True`."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        msg = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        d = _empty(True, f"{type(exc).__name__}: {msg}{where}"[:200])
        d["lines"] = _count_lines(Candidate(source).block)
        return d
    try:
        return _features(source, tree)
    except RecursionError:  # pathologically deep code: parsed but too deep to walk
        d = _empty(True, "RecursionError: too deeply nested")
        d["lines"] = _count_lines(Candidate(source).block)
        return d


def _features(source: str, tree: ast.Module) -> dict[str, Any]:
    mod = TritonModule(tree)
    res = _Resolver(mod)
    d = _empty()
    d["n_kernels"] = len(mod.kernels)
    d["kernels"] = sorted(mod.kernels)

    all_ops: set[str] = set()
    largest: tuple[int, str] | None = None
    fusion = 0
    for name in sorted(mod.kernels):
        fn = mod.kernels[name]
        ops: set[str] = set()
        size = 0
        for node in ast.walk(fn):
            size += 1
            if isinstance(node, (ast.For, ast.While, ast.AsyncFor)):
                d["n_loops"] += 1
            if isinstance(node, ast.Call):
                op = mod.tl_name(node)
                if op is None:
                    continue
                ops.add(op)
                last = op.rpartition(".")[2]
                if last == "load":
                    d["n_loads"] += 1
                elif last == "store":
                    d["n_stores"] += 1
                elif last == "dot":
                    d["uses_dot"] = True
                elif last.startswith("atomic_"):
                    d["uses_atomics"] = True
        all_ops |= ops
        compute = {op for op in ops if op.rpartition(".")[2] not in PLUMBING}
        if largest is None or size > largest[0]:
            largest, fusion = (size, name), len(compute)
    d["tl_ops"] = sorted(all_ops)
    d["fusion"] = fusion

    constexprs: dict[str, set[Any]] = {}
    dynamic: set[str] = set()
    options: dict[str, set[Any]] = {k: set() for k in LAUNCH_OPTIONS}

    def record(name: str, expr: ast.expr, fn: ast.AST | None, cls: str | None, into: dict[str, set[Any]]) -> None:
        vals, ok = res.values(expr, fn, cls)
        into.setdefault(name, set()).update(v for v in vals if not isinstance(v, bool) or into is constexprs)
        if not ok and _is_tile(name) and into is constexprs:
            dynamic.add(name)

    def visit(node: ast.AST, fn: ast.AST | None, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, None, child.name)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, child, cls)
                continue
            if isinstance(child, ast.Call):
                func = child.func
                if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in mod.kernels:
                    d["n_launch_sites"] += 1
                    for name, value in launch_arguments(child, mod.kernels[func.value.id]):
                        record(name, value, fn, cls, options if name in LAUNCH_OPTIONS else constexprs)
                elif mod.is_config(child):
                    d["n_autotune_configs"] += 1
                    for name, value in config_entries(child):
                        record(name, value, fn, cls, options if name in LAUNCH_OPTIONS else constexprs)
            visit(child, fn, cls)

    visit(tree, None, None)
    d["launch_constexprs"] = {k: _sortable(v) for k, v in sorted(constexprs.items())}
    d["tile_sizes"] = sorted(
        {v for k, vs in constexprs.items() if _is_tile(k) for v in vs if isinstance(v, int) and not isinstance(v, bool)}
    )
    d["dynamic_tiles"] = sorted(dynamic)
    d["num_warps"] = sorted(v for v in options["num_warps"] if isinstance(v, int))
    d["num_stages"] = sorted(v for v in options["num_stages"] if isinstance(v, int))

    block = Candidate(source).block
    try:
        block_tree: ast.AST = pyast.parse(block)
    except (SyntaxError, ValueError):
        block_tree = tree
    d["ast_nodes"] = d["complexity"] = sum(1 for _ in ast.walk(block_tree))
    d["lines"] = _count_lines(block)
    return d
