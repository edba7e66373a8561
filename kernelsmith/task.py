"""A KernelBench-format task: `class Model`, `get_inputs()`, `get_init_inputs()`, sizes as module constants.

Reading and checking a task is static (AST only) so the orchestrator never executes task code; executing it
(`load_module`) happens only inside a referee child process.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import math
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith import pyast

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
CPU_OVERRIDES_NAME = "CPU_OVERRIDES"


class TaskError(pyast.SourceError):
    """A task file that cannot be used; the message names the file and the problem (`kind`: what it is)."""


class TaskMissingModule(TaskError):
    """A task imports a module that is not installed (kind `missing_module`): said before any process runs the
    task, with the extra that installs it, instead of a ModuleNotFoundError from inside the referee."""

    def __init__(self, message: str, file: str | Path | None, module: str, extra: str | None):
        super().__init__(message, file, "missing_module")
        self.module, self.extra = module, extra


# Third-party modules KernelBench's tasks import beyond torch and numpy (levels 1-3: einops, in the Mamba2
# tasks), installed by the `kernelbench` extra: `bash scripts/setup.sh kernelbench`.
KERNELBENCH_EXTRA = "kernelbench"
KERNELBENCH_MODULES = frozenset({"einops"})
_GUARDS = frozenset({"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


def _imports(tree: ast.AST) -> list[tuple[str, int]]:
    """(top-level module, line) of every absolute import anywhere in the task, except those under a `try` that
    catches ImportError (an optional import the task handles itself)."""
    out: list[tuple[str, int]] = []

    def guarded(handler: ast.ExceptHandler) -> bool:
        kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return any(k is None or (isinstance(k, ast.Name) and k.id in _GUARDS) for k in kinds)

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.extend((a.name.split(".")[0], node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.append((node.module.split(".")[0], node.lineno))
        elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
            if not any(guarded(h) for h in node.handlers):  # type: ignore[attr-defined]
                for child in node.body:  # type: ignore[attr-defined]
                    visit(child)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:  # type: ignore[attr-defined]
                visit(child)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _installed(module: str) -> bool:
    if module in sys.builtin_module_names or module in getattr(sys, "stdlib_module_names", ()):
        return True
    try:  # a top-level name: finds the module without importing anything
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules without a spec: it is there
        return True
    except ImportError:
        return False


def check_imports(tree: ast.AST, path: Path | str) -> None:
    """Refuse a task that imports a module this environment lacks (`TaskMissingModule`, one line naming the
    file and line, the module and what installs it); the judge runs tasks with the packages installed here."""
    for module, line in dict.fromkeys(_imports(tree)):
        if _installed(module):
            continue
        if module in KERNELBENCH_MODULES:
            how = (f"install the {KERNELBENCH_EXTRA} extra: bash scripts/setup.sh {KERNELBENCH_EXTRA} "
                   f"(or pip install 'kernelsmith[{KERNELBENCH_EXTRA}]')")
            extra: str | None = KERNELBENCH_EXTRA
        else:
            how = "install the package that provides it into this environment (the referee runs tasks with it)"
            extra = None
        raise TaskMissingModule(f"{path}:{line}: the task imports {module}, which is not installed: {how}",
                                path, module, extra)


def parse_value(text: str) -> Any:
    """Parse a `--set` value: a Python literal (int, float, tuple, bool) or else the bare string. The value is
    checked against the constant's own type when the task is loaded (`coerce_constant`)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """Turn `["batch_size=16", "dim=256"]` into a dict; raise `TaskError` naming the bad pair."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise TaskError(f"--set {pair!r}: expected NAME=VALUE with NAME a Python identifier", kind="bad_override")
        out[name] = parse_value(value.strip())
    return out


_TYPE_WORDS = {bool: "a bool (True or False)", int: "an integer", float: "a finite number", str: "a string"}


def _coerce(value: Any, like: Any) -> Any:
    """`value` as the type of `like` (a constant's current value); ValueError when it is not one."""
    kind = type(like)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                return float(value)
    elif kind is str:
        return value if isinstance(value, str) else str(value)
    elif kind in (tuple, list):
        if isinstance(value, (tuple, list)):
            types_ = {type(x) for x in like}
            if len(types_) == 1 and next(iter(types_)) in _TYPE_WORDS:
                value = [_coerce(x, like[0]) for x in value]
            return kind(value)
        raise ValueError(f"a {kind.__name__} like {like!r}")
    else:  # None, dicts, complex...: any literal
        return value
    raise ValueError(_TYPE_WORDS[kind])


def coerce_constant(name: str, value: Any, constants: dict[str, Any], path: Path | str) -> Any:
    """An override of constant `name` as the constant's own type (`--set batch_size=abc` is refused here, before
    any process runs the task, not as a crash in torch); `TaskError` naming the constant and the type."""
    like = constants[name]
    try:
        return _coerce(value, like)
    except ValueError as exc:
        raise TaskError(f"{path}: cannot set {name}={value!r}: {name} is {type(like).__name__} "
                        f"({like!r} in the task); expected {exc}", path, "bad_override") from None


class _Unknown(Exception):
    """A value the static reader cannot know (a call, an attribute, a name that is not a constant)."""


_MAX_BITS = 256  # bigger integers are no size: refusing them keeps `10 ** 10 ** 10` from running here
_MAX_ITEMS = 4096  # the longest list a constant may be computed into (`[1024] * 16`)
_BINOPS: dict[type, Any] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b, ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b, ast.BitAnd: lambda a, b: a & b, ast.BitXor: lambda a, b: a ^ b,
}


def _number(v: Any) -> Any:
    if type(v) is int and v.bit_length() <= _MAX_BITS:
        return v
    if type(v) is float and math.isfinite(v):
        return v
    raise _Unknown


def _static_value(node: ast.expr, env: dict[str, Any]) -> Any:
    """The value of a constant's expression without running it: literals, earlier constants and arithmetic on
    numbers (`2048 * 2`, `features * 2`), tuples and lists of those; `_Unknown` for anything else."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Unknown
    if isinstance(node, (ast.Tuple, ast.List)):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise _Unknown
        items = [_static_value(e, env) for e in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _number(_static_value(node.operand, env))
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _static_value(node.left, env), _static_value(node.right, env)
        if isinstance(node.op, ast.Add) and type(a) is type(b) and isinstance(a, (tuple, list)):
            return a + b
        if isinstance(node.op, ast.Mult) and isinstance(a, (tuple, list)) and type(b) is int \
                and len(a) * max(b, 0) <= _MAX_ITEMS:  # `[1024] * 16`
            return a * b
        a, b = _number(a), _number(b)
        if isinstance(node.op, (ast.Pow, ast.LShift)) and not (type(b) is int and 0 <= b <= _MAX_BITS) and \
                not (isinstance(node.op, ast.Pow) and type(a) is float):
            raise _Unknown
        try:
            return _number(_BINOPS[type(node.op)](a, b))
        except (ArithmeticError, TypeError, ValueError):
            raise _Unknown from None
    raise _Unknown


def _targets(node: ast.stmt) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        return [node.target]
    return []


def _unpacked(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr | None]] | None:
    """`D, H, W = 16, 32, 32` → [(D, 16), ...] (None where a part is not a plain name: no constant)."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if not isinstance(target, (ast.Tuple, ast.List)) or any(isinstance(e, ast.Starred) for e in target.elts):
        return None
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) and \
            not any(isinstance(e, ast.Starred) for e in value.elts):
        out: list[tuple[str, ast.expr | None]] = []
        for t, v in zip(target.elts, value.elts):
            inner = _unpacked(t, v)
            if inner is None:
                return None
            out += inner
        return out
    return None


def _constants(tree: ast.Module) -> tuple[dict[str, Any], set[str]]:
    """The task's module-level constants as Python would leave them, read statically, and the names among
    them computed from other names (`total = batch_size * dim`: they follow, `size_constants` leaves them out).

    A constant is a top-level assignment of a value `_static_value` knows: `N = 4096`, `N = 2048 * 2`,
    `h = w = 128`, `D, H, W = 16, 32, 32` (also from a tuple constant), `dim = features * 2`, `N *= 2`. Any
    other binding of a name (def, import, an unknown value) ends its life as a constant, as it would in Python."""
    consts: dict[str, Any] = {}
    derived: set[str] = set()
    for node in tree.body:
        targets = _targets(node)
        if targets:
            value_node = node.value  # type: ignore[union-attr]
            refs = any(isinstance(n, ast.Name) for n in ast.walk(value_node))
            try:
                value = _static_value(value_node, consts)
            except _Unknown:
                value = _Unknown
            for target in targets:
                pairs = _unpacked(target, value_node)
                if pairs is None and value is not _Unknown and isinstance(target, (ast.Tuple, ast.List)) \
                        and isinstance(value, (tuple, list)) and len(value) == len(target.elts) \
                        and all(isinstance(e, ast.Name) for e in target.elts):
                    pairs = [(e.id, None) for e in target.elts]  # `D, H, W = shape`
                    for (name, _), v in zip(pairs, value):
                        consts[name] = v
                        derived.add(name)
                    continue
                if pairs is None:
                    for name in pyast.bound_names(ast.Module([ast.Assign([target], value_node)], []))[0]:
                        consts.pop(name, None)
                    continue
                for name, part in pairs:
                    try:
                        v = value if part is value_node else _static_value(part, consts)
                        if v is _Unknown:
                            raise _Unknown
                    except _Unknown:
                        consts.pop(name, None)
                        continue
                    consts[name] = v
                    part_refs = refs if part is value_node else any(isinstance(n, ast.Name) for n in ast.walk(part))
                    (derived.add if part_refs else derived.discard)(name)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in consts:
            name = node.target.id
            try:
                consts[name] = _static_value(ast.BinOp(ast.Name(name, ast.Load()), node.op, node.value), consts)
            except _Unknown:
                consts.pop(name, None)
        else:
            for name in pyast.bound_names(ast.Module([node], []))[0]:
                consts.pop(name, None)
    return consts, derived & set(consts)


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """The task's overridable constants (see `_constants`)."""
    return _constants(tree)[0]


def _text(value: Any, lines: int = 1) -> str:
    """`value` as source spanning `lines` lines (parenthesised, so the line numbers after it do not move)."""
    text = repr(value)
    pyast.parse(text, mode="eval")  # every override is a literal: its repr reads back
    return f"({text}" + "\n" * (lines - 1) + ")" if lines > 1 else text


def rewrite_constants(source: str, overrides: dict[str, Any], filename: str = "<task>") -> str:
    """Return `source` with top-level constants set to `overrides`, so dependent constants follow too.

    A source-level rewrite (the task is never run here) that edits only the values' text: comments stay and
    every line keeps its number (the seed generator's messages name lines of the task file). `N = 2048 * 2`
    gets its value replaced, so do the parts of an unpacking of literals (`D, H, W = 16, 8, 32`); a chained
    or computed binding (`h = w = 128`, `D, H, W = shape`) stays and `; h = 8` follows it on its line; `N *= 2`
    of a set constant becomes `N = 8` (the value set is the value the task sees)."""
    if not overrides:
        return source
    tree = pyast.parse(source, filename=filename)
    edits: list[tuple[int, int, int, int, str]] = []  # (line, col, end line, end col, text); cols in bytes

    def replace(node: ast.AST, text: str) -> None:
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, text))  # type: ignore

    def replace_parts(target: ast.expr, value: ast.expr) -> None:
        for t, v in zip(target.elts, value.elts):  # type: ignore[attr-defined]
            if isinstance(t, ast.Name) and t.id in overrides:
                replace(v, _text(overrides[t.id], v.end_lineno - v.lineno + 1))  # type: ignore[operator]
            elif isinstance(t, (ast.Tuple, ast.List)):
                replace_parts(t, v)

    for node in tree.body:
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id in overrides:
            name = node.target.id
            replace(node, f"{name} = {_text(overrides[name], node.end_lineno - node.lineno + 1)}")  # type: ignore
            continue
        targets = _targets(node)
        value = getattr(node, "value", None)
        if not targets or value is None:
            continue
        if len(targets) == 1 and isinstance(targets[0], ast.Name):
            if targets[0].id in overrides:
                replace(value, _text(overrides[targets[0].id], value.end_lineno - value.lineno + 1))
            continue
        if len(targets) == 1 and _unpacked(targets[0], value) is not None:
            replace_parts(targets[0], value)
            continue
        after = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id in overrides]
        if after:
            text = "".join(f"; {name} = {_text(overrides[name])}" for name in dict.fromkeys(after))
            edits.append((node.end_lineno, node.end_col_offset, node.end_lineno, node.end_col_offset, text))
    lines = source.encode().split(b"\n")  # as the parser counts lines (str.splitlines also splits at \f, \x1c...)
    for line, col, end_line, end_col, text in sorted(edits, reverse=True):
        head, tail = lines[line - 1][:col], lines[end_line - 1][end_col:]
        lines[line - 1:end_line] = [head + text.encode() + tail]
    return b"\n".join(lines).decode()


@dataclass(frozen=True)
class Task:
    """A task file read and checked without running it; `source` is the code with overrides applied."""

    path: Path
    original_source: str
    source: str
    constants: dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    has_test_inputs: bool = False
    derived: frozenset[str] = frozenset()  # constants computed from other constants (they follow a --set)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def digest(self) -> str:
        """Identifies the task as evaluated (code + overrides): the key for cached reference results."""
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @classmethod
    def load(cls, path: str | Path, overrides: dict[str, Any] | None = None, device: str = "cuda") -> Task:
        """Read `path` and apply overrides (a task's `CPU_OVERRIDES` first when `device == "cpu"`)."""
        path = Path(path)
        original = pyast.read_source(path, "task", TaskError)
        try:
            tree = pyast.parse(original, filename=str(path))
        except SyntaxError as exc:
            raise TaskError(f"{path}:{exc.lineno}: syntax error in task: {exc.msg}", path, "syntax") from None
        except (ValueError, MemoryError, RecursionError) as exc:  # too deeply nested to parse
            raise TaskError(f"{path}: cannot parse task: {exc.__class__.__name__}: {exc}", path, "syntax") from None
        defined, star = pyast.bound_names(tree)
        missing = [name for name in REQUIRED_NAMES if name not in defined]
        if missing and not star:  # `from x import *` may bind them: the judge then says whether it did
            raise TaskError(f"{path}: not a KernelBench task: missing {', '.join(missing)}", path, "not_a_task")
        check_imports(tree, path)
        constants, derived = _constants(tree)
        applied: dict[str, Any] = {}
        cpu = constants.get(CPU_OVERRIDES_NAME)
        if device == "cpu" and isinstance(cpu, dict):
            applied.update(cpu)
        applied.update(overrides or {})
        unknown = sorted(k for k in applied if k not in constants or k == CPU_OVERRIDES_NAME)
        if unknown:
            known = ", ".join(sorted(k for k in constants if k != CPU_OVERRIDES_NAME and not k.startswith("_")))
            raise TaskError(
                f"{path}: cannot set {', '.join(unknown)}: not a module-level constant (known: {known or 'none'})",
                path, "bad_override",
            )
        applied = {k: coerce_constant(k, v, constants, path) for k, v in applied.items()}
        source = rewrite_constants(original, applied, str(path))
        if applied:  # read again: the constants computed from a set one follow it, as they will when it runs
            constants, derived = _constants(pyast.parse(source, filename=str(path)))
        return cls(
            path=path,
            original_source=original,
            source=source,
            constants=constants,
            overrides=applied,
            has_test_inputs="get_test_inputs" in defined,
            derived=frozenset(derived - set(applied)),
        )

    def size_constants(self) -> dict[str, int]:
        """The task's integer constants as evaluated (its sizes, mostly): what `--set` can make smaller. Those
        computed from other constants (`total = batch_size * dim`) are left out: they follow their sources."""
        return {k: v for k, v in self.constants.items()
                if type(v) is int and k != CPU_OVERRIDES_NAME and not k.startswith("_") and k not in self.derived}


def load_module(source: str, filename: str, name: str) -> types.ModuleType:
    """Execute task or candidate source as a fresh module (child process only)."""
    module = types.ModuleType(name)
    module.__file__ = filename
    code = compile(source, filename, "exec")
    sys.modules[name] = module  # dataclasses, pickling and Triton's source lookup need it registered
    exec(code, module.__dict__)
    return module
