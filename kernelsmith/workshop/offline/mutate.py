"""Launch knobs without a model: find a candidate's tunable integer literals statically and move them.

The one implementation of knob discovery; the backends expose it (`Backend.knobs`: Triton launches from
`triton_knobs`, CUDA thread counts from `cuda_knobs`), and the tuner (`tune.py`) asks the run's backend.

The program is read with `ast` and never executed. A *knob* is one integer literal in the source that sets a
launch parameter, found in these places (only inside the EVOLVE-BLOCK when the file has markers, never inside
a `@triton.jit` kernel body):

- keyword (or positional `tl.constexpr`) arguments at launch sites `kernel[grid](...)`: block sizes (names
  with BLOCK or TILE, and any other UPPER_CASE name bound to an int literal), GROUP sizes, `num_warps`,
  `num_stages`; the value is followed through `a if c else b`, `min`/`max` caps and floors, helper functions
  defined in the file (their literal arguments, named by the helper's parameters, and their `return`
  values), local variables, module and class constants and `self.X`;
- assignments to UPPER_CASE or block/tile/group/warps/stages-like names in the module, class bodies and
  non-kernel functions (`BLOCK = 1024`, `BLOCK_M = 128 if M >= 128 else 64`, `block = min(..., 4096)`);
- `triton.Config({...}, num_warps=..., num_stages=...)` entries.

Allowed values: block sizes are powers of two in 16..8192 (16..256 when the kernel uses `tl.dot`), GROUP sizes
powers of two in 1..64, `num_warps` in {1, 2, 4, 8, 16}, `num_stages` in 1..5. A mutation moves a knob to a
neighbouring allowed value (x2 or /2 for powers of two, +-1 for stages).

Safety: a block constexpr whose kernel neither loops over it (`range(..., BLOCK)`) nor gets a grid that
depends on it must cover its whole extent in one program (a single-block row kernel). Its knobs may only
grow: shrinking `min(next_power_of_2(n_cols), 4096)` would silently drop columns.

API (`finder` is a backend's `knobs`; by default `knobs`, both backends' together):
    triton_knobs(source) / cuda_knobs(source) -> list[Knob]   what can be tuned, current and allowed values
    knobs(source) -> list[Knob]                               both of the above
    apply_values(source, [(knob, value)]) -> str              the literals replaced
    mutate(source, rng, n_changes=1, finder) -> Mutation      n distinct random moves; NothingToMutate if none
    set_knobs(source, {name: value}, finder) -> str           set knobs by name (text edits at the literals)
    sweep(source, name, values=None, finder) -> list[str]     one program per value (default: every allowed one)

Edits replace only the literal's characters, so formatting and comments elsewhere stay as they were, and every
result is checked with `ast.parse`.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from kernelsmith import pyast
from kernelsmith.candidate import BLOCK_END, BLOCK_START
from kernelsmith.workshop.features import TritonModule, config_entries, launch_arguments

WARPS = (1, 2, 4, 8, 16)
STAGES = (1, 2, 3, 4, 5)
BLOCK_MIN, BLOCK_MAX, DOT_BLOCK_MAX = 16, 8192, 256
GROUP_MAX = 64
KINDS = ("block", "group", "num_warps", "num_stages")
_MAX_DEPTH = 8
_RANGE_FUNCS = {"range", "static_range"}


class NothingToMutate(ValueError):
    """The program has no tunable knob (or does not parse)."""


@dataclass(frozen=True)
class Knob:
    """One integer literal that tunes a launch. Positions are 1-based lines and 0-based character columns."""

    name: str                      # unique and stable, e.g. "ModelNew.BLOCK", "matmul_kernel.num_warps.if"
    kind: str                      # one of KINDS
    value: int
    allowed: tuple[int, ...]       # sorted; includes `value`
    label: str                     # human text, e.g. "relu_kernel launch: BLOCK"
    uses: tuple[str, ...]          # launch parameters it reaches, e.g. ("relu_kernel.BLOCK",)
    grow_only: bool
    line: int
    col: int
    end_line: int
    end_col: int

    def moves(self) -> tuple[int, ...]:
        """The neighbouring allowed values (one step down, one step up)."""
        below = [v for v in self.allowed if v < self.value]
        above = [v for v in self.allowed if v > self.value]
        return tuple(([below[-1]] if below else []) + ([above[0]] if above else []))

    def describe(self, new: int) -> str:
        return f"{self.label} {self.value} → {new}"


KnobFinder = Callable[[str], "Sequence[Knob]"]  # a backend's `knobs`: source -> its knobs


@dataclass(frozen=True)
class Mutation:
    source: str
    changes: list[str]
    edits: list[tuple[str, int, int]] = field(default_factory=list)  # (knob name, old, new)


# ---------------------------------------------------------------------------------------------- helpers


def _is_int(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _is_upper(name: str) -> bool:
    return any(c.isalpha() for c in name) and name.upper() == name


def _kind_of(name: str) -> str | None:
    """The knob kind a parameter or variable name implies (None: not a tuning name)."""
    low = name.lower()
    if "warp" in low:
        return "num_warps"
    if "stage" in low:
        return "num_stages"
    if "group" in low:
        return "group"
    if "block" in low or "tile" in low:
        return "block"
    if _is_upper(name):
        return "block"
    return None


def _short(node: ast.AST, limit: int = 32) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _call_name(func: ast.AST) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _walk_local(node: ast.AST):
    """ast.walk that does not enter nested functions, classes or lambdas (the node itself excepted)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))


def _names_in(node: ast.AST) -> set[str]:
    """Names, `self.X` attributes (as "self.X") and string subscripts (meta['BLOCK']) an expression mentions."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            out.add(f"self.{n.attr}")
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
            out.add(n.slice.value)
    return out


@dataclass
class _Hit:
    node: ast.Constant
    home: str                                  # where the literal lives, e.g. "ModelNew.BLOCK"
    home_text: str                             # the same for people, e.g. "_num_warps return #1"
    roles: tuple[tuple[str, str], ...] = ()    # (id token, text) from the home down to the literal
    direct: bool = True                        # the whole value (or an if/else branch), not an argument
    inverse: bool = False                      # reached through a divisor: growing it shrinks the result
    named: bool = False                        # the home is a named constant/variable (not a launch keyword)


class _Use(NamedTuple):
    site: str      # "relu_kernel" (a launch) or "config1" (a triton.Config)
    where: str     # for people: "relu_kernel launch", "matmul_kernel triton.Config #1"
    param: str
    kind: str
    dot: bool      # the kernel uses tl.dot (tile bounds 16..256)
    grow: bool     # a block that must cover its extent: may only grow


@dataclass
class _Found:
    hit: _Hit
    uses: list[_Use] = field(default_factory=list)
    target_kind: str | None = None


# ---------------------------------------------------------------------------------------------- analysis


class _Analysis:
    def __init__(self, source: str):
        self.source = source
        self.tree = pyast.parse(source)
        self.parent: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parent[child] = node
        # The file's own kernels (`@triton.jit`, whatever triton is imported as: the features' reading), at any
        # depth; helpers are the module-level functions that are not kernels.
        self.module = TritonModule(self.tree)
        self.kernels: dict[str, ast.FunctionDef] = {}
        self.helpers: dict[str, ast.FunctionDef] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.FunctionDef):
                if any(self.module.is_jit(d) for d in node.decorator_list):
                    self.kernels[node.name] = node
                elif isinstance(self.parent.get(node), ast.Module):
                    self.helpers[node.name] = node
        self.region = _evolve_region(source)
        self.offsets = _line_offsets(source)
        self.found: dict[tuple[int, int], _Found] = {}

    # ---- scopes

    def _enclosing(self, node: ast.AST, kinds: tuple[type, ...]) -> ast.AST | None:
        n = self.parent.get(node)
        while n is not None and not isinstance(n, kinds):
            n = self.parent.get(n)
        return n

    def _func_of(self, node: ast.AST) -> ast.FunctionDef | None:
        return self._enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef))  # type: ignore[return-value]

    def _class_of(self, node: ast.AST) -> ast.ClassDef | None:
        return self._enclosing(node, (ast.ClassDef,))  # type: ignore[return-value]

    def _in_kernel(self, node: ast.AST) -> bool:
        """Inside a `@triton.jit` function's signature or body (its decorators, e.g. autotune configs, are not)."""
        child, n = node, self.parent.get(node)
        while n is not None:
            if isinstance(n, ast.FunctionDef) and n.name in self.kernels and child not in n.decorator_list:
                return True
            child, n = n, self.parent.get(n)
        return False

    @staticmethod
    def _assigns(body_owner: ast.AST, name: str) -> list[ast.AST]:
        """Values assigned to `name` directly in this scope (module, class body or function)."""
        out = []
        for n in _walk_local(body_owner):
            if isinstance(n, ast.Assign):
                if any(isinstance(t, ast.Name) and t.id == name for t in n.targets):
                    out.append(n.value)
            elif isinstance(n, ast.AnnAssign) and n.value is not None:
                if isinstance(n.target, ast.Name) and n.target.id == name:
                    out.append(n.value)
        return out

    def _scope_name(self, node: ast.AST) -> str:
        """Prefix for a home inside this node's innermost function or class ("" at module level)."""
        n = self._enclosing(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        return f"{n.name}." if n is not None else ""  # type: ignore[union-attr]

    # ---- resolution of an expression to the integer literals that set it

    def resolve(self, expr: ast.AST, hit: _Hit, follow: bool, depth: int = 0,
                seen: frozenset[int] = frozenset()) -> list[_Hit]:
        if depth > _MAX_DEPTH or id(expr) in seen:
            return []
        seen = seen | {id(expr)}

        def sub(e, role=None, direct=None, inverse=False) -> list[_Hit]:
            h = _Hit(hit.node, hit.home, hit.home_text, hit.roles + ((role,) if role else ()),
                     hit.direct if direct is None else (hit.direct and direct), hit.inverse or inverse, hit.named)
            return self.resolve(e, h, follow, depth + 1, seen)

        if _is_int(expr):
            hit.node = expr  # type: ignore[assignment]
            return [hit]
        if isinstance(expr, ast.IfExp):
            test = _short(expr.test)
            return sub(expr.body, ("if", f"if {test}")) + sub(expr.orelse, ("else", f"unless {test}"))
        if isinstance(expr, ast.BinOp):
            inv = isinstance(expr.op, (ast.Div, ast.FloorDiv, ast.Mod, ast.RShift))
            return sub(expr.left, direct=False) + sub(expr.right, direct=False, inverse=inv)
        if isinstance(expr, ast.Call):
            fname = _call_name(expr.func)
            if fname in ("min", "max") and isinstance(expr.func, ast.Name):
                role = ("cap", "min cap") if fname == "min" else ("floor", "max floor")
                out = []
                for a in expr.args:
                    out += sub(a, role if _is_int(a) else None, direct=False)
                return out
            if isinstance(expr.func, ast.Name) and fname in self.helpers:
                return self._resolve_helper(expr, self.helpers[fname], hit, follow, depth, seen)
            return []  # next_power_of_2(n), cdiv(...), ...: the argument is the data's extent
        if not follow:
            return []
        ref = expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else None
        if ref is not None and not hit.direct and _kind_of(ref) is None:
            return []  # data inside an expression (n_cols, R): a tuning literal does not live there
        if isinstance(expr, ast.Name):
            return self._resolve_name(expr, hit, depth, seen)
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            cls = self._class_of(expr)
            if cls is None:
                return []
            out = []
            for value in self._assigns(cls, expr.attr):
                out += self.resolve(value, self._home(f"{cls.name}.{expr.attr}", hit), follow, depth + 1, seen)
            for meth in cls.body:
                if isinstance(meth, ast.FunctionDef):
                    for n in _walk_local(meth):
                        if isinstance(n, ast.Assign) and any(
                                isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                                and t.value.id == "self" and t.attr == expr.attr for t in n.targets):
                            out += self.resolve(n.value, self._home(f"{cls.name}.{expr.attr}", hit), follow,
                                                depth + 1, seen)
            return out
        return []

    @staticmethod
    def _home(home: str, hit: _Hit, text: str | None = None) -> _Hit:
        return _Hit(hit.node, home, text or home, (), True, hit.inverse, True)

    def _resolve_name(self, expr: ast.Name, hit: _Hit, depth: int, seen: frozenset[int]) -> list[_Hit]:
        fn = self._func_of(expr)
        if fn is not None:
            values = self._assigns(fn, expr.id)
            if values:
                out = []
                for v in values:
                    out += self.resolve(v, self._home(f"{fn.name}.{expr.id}", hit), True, depth + 1, seen)
                return out
            if any(a.arg == expr.id for a in fn.args.args + fn.args.kwonlyargs):
                return []  # a parameter: set by the caller
        out = []
        for v in self._assigns(self.tree, expr.id):
            out += self.resolve(v, self._home(expr.id, hit), True, depth + 1, seen)
        return out

    def _resolve_helper(self, call: ast.Call, helper: ast.FunctionDef, hit: _Hit, follow: bool, depth: int,
                        seen: frozenset[int]) -> list[_Hit]:
        params = [a.arg for a in helper.args.args]
        out = []
        # Literal arguments (named by the helper's parameters); Name arguments are the caller's data, not knobs.
        for i, a in enumerate(call.args):
            if _is_int(a):
                pname = params[i] if i < len(params) else f"arg{i + 1}"
                out += self.resolve(a, _Hit(hit.node, hit.home, hit.home_text,
                                            hit.roles + ((pname, f"{helper.name} {pname}"),), False,
                                            hit.inverse, hit.named), follow, depth + 1, seen)
        for kw in call.keywords:
            if kw.arg and _is_int(kw.value):
                out += self.resolve(kw.value, _Hit(hit.node, hit.home, hit.home_text,
                                                   hit.roles + ((kw.arg, f"{helper.name} {kw.arg}"),), False,
                                                   hit.inverse, hit.named), follow, depth + 1, seen)
        returns = [n for n in _walk_local(helper) if isinstance(n, ast.Return) and n.value is not None]
        returns.sort(key=lambda n: (n.lineno, n.col_offset))
        for i, ret in enumerate(returns, 1):
            home = _Hit(hit.node, f"{helper.name}.return{i}", f"{helper.name} return #{i}", (), True,
                        hit.inverse, True)
            out += self.resolve(ret.value, home, True, depth + 1, seen)
        return out

    # ---- discovery

    def _record(self, h: _Hit, use: _Use | None, target_kind: str | None) -> None:
        node = h.node
        if not self._inside(node) or self._in_kernel(node):
            return
        key = (node.lineno, node.col_offset)
        f = self.found.get(key)
        if f is None:
            f = self.found[key] = _Found(h, target_kind=target_kind)
        if use is not None and use not in f.uses:
            f.uses.append(use)

    def _inside(self, node: ast.AST) -> bool:
        if self.region is None:
            return True
        start = _offset(self.offsets, self.source, node.lineno, node.col_offset)
        end = _offset(self.offsets, self.source, node.end_lineno, node.end_col_offset)
        return self.region[0] <= start and end <= self.region[1]

    def _tiled(self, kernel: ast.FunctionDef | None, param: str, value: ast.AST, grid: ast.AST) -> bool:
        """Whether several programs or loop iterations cover the extent a block constexpr spans."""
        if kernel is None:
            return True  # unknown kernel: no claim
        for n in ast.walk(kernel):
            if isinstance(n, ast.For) and isinstance(n.iter, ast.Call) and _call_name(n.iter.func) in _RANGE_FUNCS:
                if any(param in _names_in(a) for a in n.iter.args):
                    return True
        # The grid's names, followed through the launcher's local assignments to any depth (`grid = (tiles,
        # batch)` with `tiles = triton.cdiv(M, block_m) * ...` two lines up depends on block_m).
        grid_names = _names_in(grid)
        fn = self._func_of(grid)
        todo = list(grid_names) if fn is not None else []
        while todo:
            for v in self._assigns(fn, todo.pop()):
                new = _names_in(v) - grid_names
                grid_names |= new
                todo += new
        value_names = _names_in(value) | {param}
        return bool(grid_names & value_names)

    def _launch(self, call: ast.Call) -> None:
        sub = call.func
        assert isinstance(sub, ast.Subscript)
        kname = _call_name(sub.value) or "kernel"
        kernel = self.kernels.get(kname)
        dot = kernel is not None and any(
            isinstance(n, ast.Call) and _call_name(n.func) == "dot" for n in ast.walk(kernel))
        for pname, value in launch_arguments(call, kernel):
            if pname in ("num_warps", "num_stages"):
                kind = pname
            else:
                kind = _kind_of(pname)
                if kind is None or (kind == "block" and not ("BLOCK" in pname.upper() or "TILE" in pname.upper())
                                    and not _is_int(value)):
                    continue  # an UPPER_CASE flag like SINGLE_PASS=single
            grow = kind == "block" and not self._tiled(kernel, pname, value, sub.slice)
            seed = _Hit(value, f"{kname}.{pname}", f"{kname} launch: {pname}")  # type: ignore[arg-type]
            for h in self.resolve(value, seed, follow=True):
                if grow and h.inverse:
                    continue  # growing it would shrink a block that must cover its extent
                self._record(h, _Use(kname, f"{kname} launch", pname, kind, dot, grow), None)

    def _config(self, call: ast.Call, index: int) -> None:
        home = f"config{index}"
        n = self.parent.get(call)
        while n is not None and not isinstance(n, ast.FunctionDef):
            n = self.parent.get(n)
        kernel = n if isinstance(n, ast.FunctionDef) and n.name in self.kernels else None
        dot = kernel is not None and any(
            isinstance(c, ast.Call) and _call_name(c.func) == "dot" for c in ast.walk(kernel))
        where = (f"{kernel.name} " if kernel is not None else "") + f"triton.Config #{index}"
        for key, value in config_entries(call):
            kind = key if key in ("num_warps", "num_stages") else _kind_of(key)
            if kind is None:
                continue
            seed = _Hit(value, f"{home}.{key}", f"{where}: {key}")  # type: ignore[arg-type]
            for h in self.resolve(value, seed, follow=False):
                self._record(h, _Use(home, where, key, kind, dot, False), None)

    def _assignment(self, node: ast.Assign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Name):
                name = t.id
            elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                name = t.attr
            else:
                continue
            kind = _kind_of(name)
            if kind is None or node.value is None:
                continue
            if isinstance(t, ast.Attribute):
                cls = self._class_of(node)
                home = f"{cls.name}.{name}" if cls is not None else name
            else:
                home = self._scope_name(node) + name
            seed = _Hit(node.value, home, home, named=True)  # type: ignore[arg-type]
            for h in self.resolve(node.value, seed, follow=False):
                self._record(h, None, kind)

    def run(self) -> list[Knob]:
        configs = 0
        nodes = sorted((n for n in ast.walk(self.tree) if hasattr(n, "lineno")),
                       key=lambda n: (n.lineno, n.col_offset))
        for node in nodes:
            if self._in_kernel(node):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript):
                kname = _call_name(node.func.value)
                if kname in self.kernels or any(kw.arg in ("num_warps", "num_stages") for kw in node.keywords):
                    self._launch(node)
            elif isinstance(node, ast.Call) and self.module.is_config(node):
                configs += 1
                self._config(node, configs)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                self._assignment(node)
        return self._knobs()

    def _knobs(self) -> list[Knob]:
        out: list[Knob] = []
        names: dict[str, int] = {}
        for key in sorted(self.found):
            f = self.found[key]
            h = f.hit
            value = h.node.value
            kinds = [u.kind for u in f.uses] or ([f.target_kind] if f.target_kind else [])
            allowed: set[int] | None = None
            for kind in dict.fromkeys(kinds):
                dot = any(u.dot for u in f.uses if u.kind == kind)
                vals = _allowed(kind, value, h, dot)
                allowed = vals if allowed is None else allowed & vals
            if not allowed or value not in allowed:
                continue
            grow = any(u.grow for u in f.uses)
            if grow:
                allowed = {v for v in allowed if v >= value}
            name = ".".join([h.home] + [r[0] for r in h.roles])
            names[name] = names.get(name, 0) + 1
            if names[name] > 1:
                name = f"{name}#{names[name]}"
            out.append(Knob(
                name=name, kind=kinds[0], value=value, allowed=tuple(sorted(allowed)),
                label=_label(h, f.uses), uses=tuple(dict.fromkeys(f"{u.site}.{u.param}" for u in f.uses)), grow_only=grow,
                line=h.node.lineno, col=_char_col(self.source, self.offsets, h.node.lineno, h.node.col_offset),
                end_line=h.node.end_lineno,
                end_col=_char_col(self.source, self.offsets, h.node.end_lineno, h.node.end_col_offset),
            ))
        return out


def _allowed(kind: str, value: int, h: _Hit, dot: bool) -> set[int]:
    if kind == "num_warps":
        return set(WARPS) if value in WARPS else set()
    if kind == "num_stages":
        return set(STAGES) if value in STAGES else set()
    if not _pow2(value):
        return set()
    if kind == "group":
        return {1 << i for i in range(GROUP_MAX.bit_length()) if 1 << i <= GROUP_MAX} | {value}
    # block: literal arguments below 16 are floors/guards (max(1, ...)), not block sizes
    if value < BLOCK_MIN and not h.direct:
        return set()
    hi = DOT_BLOCK_MAX if dot else BLOCK_MAX
    lo = min(BLOCK_MIN, value)
    return {1 << i for i in range(hi.bit_length()) if lo <= 1 << i <= hi} | {value}


def _label(h: _Hit, uses: Sequence[_Use]) -> str:
    """"relu_kernel launch: BLOCK", "softmax_kernel launch: BLOCK (LOOP_BLOCK)", "MAX_SINGLE_BLOCK", ..."""
    details = [r[1] for r in h.roles]
    if not uses:
        return " ".join([h.home_text] + [f"({d})" for d in details])
    params = list(dict.fromkeys(u.param for u in uses))
    head = f"{'/'.join(dict.fromkeys(u.where for u in uses))}: {'/'.join(params)}"
    last = h.home.rsplit(".", 1)[-1]
    # Name the constant it lives in when that says more than the parameter: LOOP_BLOCK, ModelNew.TILE, a helper's
    # return; not a local variable (block_m) or a constant named like the parameter (ModelNew.BLOCK for BLOCK).
    if h.named and (last.startswith("return") or (last not in params and not last.islower())):
        details.insert(0, h.home_text)
    return head + (f" ({', '.join(details)})" if details else "")


# ---------------------------------------------------------------------------------------------- text


def _line_offsets(source: str) -> list[int]:
    offsets = [0]
    for m in re.finditer(r"\r\n|\r|\n", source):
        offsets.append(m.end())
    return offsets


def _line_text(source: str, offsets: list[int], line: int) -> str:
    start = offsets[line - 1]
    end = offsets[line] if line < len(offsets) else len(source)
    return source[start:end]


def _char_col(source: str, offsets: list[int], line: int, byte_col: int) -> int:
    return len(_line_text(source, offsets, line).encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))


def _offset(offsets: list[int], source: str, line: int, byte_col: int) -> int:
    return offsets[line - 1] + _char_col(source, offsets, line, byte_col)


def _evolve_region(source: str) -> tuple[int, int] | None:
    """Character range strictly between the markers (as Candidate.split finds them), or None without both."""
    if BLOCK_START not in source or BLOCK_END not in source:
        return None
    start = source.index(BLOCK_START) + len(BLOCK_START)
    end = source.find(BLOCK_END, start)
    if end < 0:
        return None
    return start, end


# ---------------------------------------------------------------------------------------------- API


def triton_knobs(source: str) -> list[Knob]:
    """Every tunable Triton launch knob of the program, in source order; [] when there is none or it does not
    parse. The Triton backend's `knobs` (`kernelsmith.backends.triton`): the tuner asks the backend, not this."""
    try:
        found = _Analysis(source).run()
    except (SyntaxError, ValueError, RecursionError):
        return []
    return sorted(found, key=lambda k: (k.line, k.col))


# CUDA C++ in string literals (the cuda backend's `load_inline` sources): thread-block sizes only — a modest
# set whose values every kernel tolerates when it is written against the macro/variable (grid derived from it).
CUDA_THREADS = tuple(2**i for i in range(5, 11))  # 32..1024: a warp to the per-block maximum
_CUDA_THREAD_NAME = r"(?:[A-Z_]*(?:THREADS|BLOCK_SIZE|BLOCK_DIM)[A-Z_0-9]*|BLOCK|threads(?:_per_block)?|" \
                    r"block_size|num_threads|kThreads|kBlockSize)"
_CUDA_PATTERNS = (
    ("define", re.compile(r"#define\s+(" + _CUDA_THREAD_NAME + r")\s+\(?(\d+)\)?")),
    ("var", re.compile(r"\b(?:constexpr\s+|const\s+|static\s+)*(?:int|unsigned|int64_t|size_t|dim3|auto)\s+("
                       + _CUDA_THREAD_NAME + r")\s*(?:=|\()\s*(\d+)")),
    ("launch", re.compile(r"<<<\s*[^,<>]+?,\s*()(\d+)\s*(?:,|>>>)")),
)


def cuda_knobs(source: str) -> list[Knob]:
    """The CUDA backend's `knobs` (`kernelsmith.backends.cuda`): thread counts in string literals holding CUDA code (`#define THREADS 256`, `const int threads = 256;`,
    `<<<blocks, 256>>>`), inside the EVOLVE-BLOCK when there is one; [] when it does not parse. Positions are the
    digits in the Python source, so an edit is a literal for a literal (escape sequences never contain digits we
    match)."""
    try:
        tree = pyast.parse(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    region = _evolve_region(source)
    offsets = _line_offsets(source)
    out: list[Knob] = []
    seen: dict[str, int] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value
                or isinstance(node, ast.Constant) and isinstance(node.value, str) and "<<<" in node.value):
            continue
        start = offsets[node.lineno - 1] + _char_col(source, offsets, node.lineno, node.col_offset)
        end = offsets[node.end_lineno - 1] + _char_col(source, offsets, node.end_lineno, node.end_col_offset)
        if region and not (region[0] <= start and end <= region[1]):
            continue
        text = source[start:end]
        for kind, pattern in _CUDA_PATTERNS:
            for m in pattern.finditer(text):
                value = int(m.group(2))
                if value not in CUDA_THREADS:
                    continue
                pos = start + m.start(2)
                line = next(i for i in range(len(offsets) - 1, -1, -1) if offsets[i] <= pos)
                col = pos - offsets[line]
                base = f"cuda.{m.group(1) or 'launch'}"
                seen[base] = seen.get(base, 0) + 1
                name = base if seen[base] == 1 else f"{base}.{seen[base]}"
                label = (f"CUDA #define {m.group(1)}" if kind == "define" else f"CUDA {m.group(1)}" if kind == "var"
                         else "CUDA launch threads")
                out.append(Knob(name=name, kind="block", value=value, allowed=CUDA_THREADS, label=label,
                                uses=(name,), grow_only=False, line=line + 1, col=col, end_line=line + 1,
                                end_col=col + len(m.group(2))))
    return out


def knobs(source: str) -> list[Knob]:
    """Every knob either backend finds (Triton launches and CUDA thread counts), in source order: for callers that
    do not know the program's backend. The tuner asks the run's backend (`Backend.knobs`) instead."""
    return sorted(triton_knobs(source) + cuda_knobs(source), key=lambda k: (k.line, k.col))


def apply_values(source: str, edits: Iterable[tuple[Knob, int]]) -> str:
    """The source with each knob's literal replaced by its new value (a literal for a literal)."""
    offsets = _line_offsets(source)
    spans = []
    for knob, value in edits:
        start = offsets[knob.line - 1] + knob.col
        end = offsets[knob.end_line - 1] + knob.end_col
        spans.append((start, end, str(int(value))))
    out = source
    for start, end, text in sorted(spans, reverse=True):
        out = out[:start] + text + out[end:]
    pyast.parse(out)  # a literal for a literal: always parses; checked anyway
    return out


def set_knobs(source: str, values: Mapping[str, int], finder: KnobFinder = knobs) -> str:
    """The program with the named knobs set to the given integers (KeyError names an unknown knob)."""
    by_name = {k.name: k for k in finder(source)}
    missing = [n for n in values if n not in by_name]
    if missing:
        raise KeyError(f"no knob named {', '.join(missing)}; knobs: {', '.join(by_name) or 'none'}")
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"knob {name}: value must be a positive int, got {v!r}")
    return apply_values(source, [(by_name[n], v) for n, v in values.items()])


def sweep(source: str, knob_name: str, values: Iterable[int] | None = None,
          finder: KnobFinder = knobs) -> list[str]:
    """One program per value of `knob_name` (default: every allowed value, the current one included)."""
    by_name = {k.name: k for k in finder(source)}
    if knob_name not in by_name:
        raise KeyError(f"no knob named {knob_name}; knobs: {', '.join(by_name) or 'none'}")
    vals = by_name[knob_name].allowed if values is None else tuple(values)
    return [set_knobs(source, {knob_name: v}, finder) for v in vals]


def mutate(source: str, rng: random.Random, n_changes: int = 1, finder: KnobFinder = knobs) -> Mutation:
    """Move `n_changes` distinct knobs (fewer if the program has fewer) one step each, chosen by `rng`."""
    try:
        pyast.parse(source)
    except SyntaxError as exc:
        raise NothingToMutate(f"program does not parse: {exc.msg} (line {exc.lineno})") from None
    movable = [k for k in finder(source) if k.moves()]
    if not movable:
        raise NothingToMutate("no tunable knob (launch block sizes, num_warps, num_stages, GROUP, caps)")
    chosen = rng.sample(movable, min(max(1, n_changes), len(movable)))
    chosen.sort(key=lambda k: (k.line, k.col))
    edits = [(k, rng.choice(k.moves())) for k in chosen]
    return Mutation(
        source=apply_values(source, edits),
        changes=[k.describe(v) for k, v in edits],
        edits=[(k.name, k.value, v) for k, v in edits],
    )
