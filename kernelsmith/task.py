"""A KernelBench-format task: `class Model`, `get_inputs()`, `get_init_inputs()`, sizes as module constants.

Reading and checking a task is static (AST only) so the orchestrator never executes task code; executing it
(`load_module`) happens only inside a referee child process.
"""

from __future__ import annotations

import ast
import hashlib
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


def _module_constants(tree: ast.Module) -> dict[str, Any]:
    """Top-level `NAME = <literal>` assignments: the task's overridable sizes."""
    consts: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        else:
            continue
        try:
            consts[target] = ast.literal_eval(value)
        except ValueError:
            continue
    return consts


def rewrite_constants(source: str, overrides: dict[str, Any], filename: str = "<task>") -> str:
    """Return `source` with top-level literal constants replaced, so dependent constants follow too."""
    if not overrides:
        return source
    tree = pyast.parse(source, filename=filename)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in overrides:
                node.value = pyast.parse(repr(overrides[node.targets[0].id]), mode="eval").body
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id in overrides and node.value is not None:
                node.value = pyast.parse(repr(overrides[node.target.id]), mode="eval").body
    return ast.unparse(ast.fix_missing_locations(tree))


@dataclass(frozen=True)
class Task:
    """A task file read and checked without running it; `source` is the code with overrides applied."""

    path: Path
    original_source: str
    source: str
    constants: dict[str, Any]
    overrides: dict[str, Any] = field(default_factory=dict)
    has_test_inputs: bool = False

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
        constants = _module_constants(tree)
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
        return cls(
            path=path,
            original_source=original,
            source=rewrite_constants(original, applied, str(path)),
            constants={**constants, **applied},
            overrides=applied,
            has_test_inputs="get_test_inputs" in defined,
        )

    def size_constants(self) -> dict[str, int]:
        """The task's integer constants as evaluated (its sizes, mostly): what `--set` can make smaller."""
        return {k: v for k, v in self.constants.items()
                if type(v) is int and k != CPU_OVERRIDES_NAME and not k.startswith("_")}


def load_module(source: str, filename: str, name: str) -> types.ModuleType:
    """Execute task or candidate source as a fresh module (child process only)."""
    module = types.ModuleType(name)
    module.__file__ = filename
    code = compile(source, filename, "exec")
    sys.modules[name] = module  # dataclasses, pickling and Triton's source lookup need it registered
    exec(code, module.__dict__)
    return module
