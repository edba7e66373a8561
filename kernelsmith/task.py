"""A KernelBench-format task: `class Model`, `get_inputs()`, `get_init_inputs()`, sizes as module constants.

Reading and checking a task is static (AST only) so the orchestrator never executes task code; executing it
(`load_module`) happens only inside a referee child process.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith import pyast

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")
CPU_OVERRIDES_NAME = "CPU_OVERRIDES"


class TaskError(ValueError):
    """A task file that cannot be used; the message names the file and the problem."""


def parse_value(text: str) -> Any:
    """Parse a `--set` value: a Python literal (int, float, tuple, bool) or else the bare string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def parse_overrides(pairs: list[str] | None) -> dict[str, Any]:
    """Turn `["batch_size=16", "dim=256"]` into a dict; raise `TaskError` naming the bad pair."""
    out: dict[str, Any] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name.isidentifier():
            raise TaskError(f"--set {pair!r}: expected NAME=VALUE with NAME a Python identifier")
        out[name] = parse_value(value.strip())
    return out


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
        try:
            original = path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise TaskError(f"{path}: cannot read task file ({exc.__class__.__name__}: {exc})") from None
        try:
            tree = pyast.parse(original, filename=str(path))
        except SyntaxError as exc:
            raise TaskError(f"{path}:{exc.lineno}: syntax error in task: {exc.msg}") from None
        defined = {
            n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        }
        defined |= {
            t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
        }
        missing = [name for name in REQUIRED_NAMES if name not in defined]
        if missing:
            raise TaskError(f"{path}: not a KernelBench task: missing {', '.join(missing)}")
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
                f"{path}: cannot set {', '.join(unknown)}: not a module-level constant (known: {known or 'none'})"
            )
        return cls(
            path=path,
            original_source=original,
            source=rewrite_constants(original, applied, str(path)),
            constants={**constants, **applied},
            overrides=applied,
            has_test_inputs="get_test_inputs" in defined,
        )


def load_module(source: str, filename: str, name: str) -> types.ModuleType:
    """Execute task or candidate source as a fresh module (child process only)."""
    module = types.ModuleType(name)
    module.__file__ = filename
    code = compile(source, filename, "exec")
    sys.modules[name] = module  # dataclasses, pickling and Triton's source lookup need it registered
    exec(code, module.__dict__)
    return module
