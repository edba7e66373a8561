"""Which tasks a bench runs: KernelBench-format files under `levelN` folders, and their candidates.

A path may be a task file, a `levelN` folder, or a folder holding `level1`, `level2`, ... (ours: `tasks/`;
KernelBench's: `KernelBench/KernelBench/`). A task's level is the nearest `levelN` folder above it ("unknown"
when there is none) and its key is `levelN/FILE.py`, the path its candidate has under `--candidates` (the
layout of `solutions/`). Everything here is static: task files are parsed, never run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.task import Task, TaskError

LEVEL_DIR = re.compile(r"^level_?(\d+)$", re.IGNORECASE)


class BenchInputError(ValueError):
    """Bad bench input (a missing path, no tasks, a bad level): the message names the path."""


@dataclass(frozen=True)
class BenchTask:
    key: str  # "level2/02_scale_bias_clamp_sigmoid.py": unique in a bench, the candidate's relative path
    level: str  # "level2" or "unknown"
    path: Path
    task: Task  # loaded statically with the bench's overrides (and CPU_OVERRIDES on cpu)
    overrides: dict[str, Any] = field(default_factory=dict)  # the `--set` values this task defines

    @property
    def slug(self) -> str:
        """The key without `.py`: the task's run dir under OUT/runs."""
        return self.key[:-3] if self.key.endswith(".py") else self.key


def parse_levels(text: str | None) -> set[int] | None:
    """"1,2" or "level1,level3" → {1, 2}; None → every level."""
    if text is None or not text.strip():
        return None
    levels = set()
    for part in text.split(","):
        part = part.strip().lower().removeprefix("level").strip()
        if not part.isdigit() or int(part) < 1:
            raise BenchInputError(f"--levels {text!r}: expected level numbers like 1,2 (got {part!r})")
        levels.add(int(part))
    return levels


def level_of(path: Path) -> str:
    for parent in path.resolve().parents:
        m = LEVEL_DIR.match(parent.name)
        if m:
            return f"level{int(m.group(1))}"
    return "unknown"


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t.lower() for t in re.split(r"(\d+)", text)]


def _py_files(folder: Path) -> list[Path]:
    return [p for p in folder.glob("*.py") if p.is_file() and not p.name.startswith(("_", "."))]


def _files_in(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if LEVEL_DIR.match(path.name):
        return _py_files(path)
    level_dirs = [d for d in path.iterdir() if d.is_dir() and LEVEL_DIR.match(d.name)]
    if level_dirs:
        return [f for d in level_dirs for f in _py_files(d)]
    return _py_files(path)


def discover(paths: list[Path], levels: set[int] | None = None, overrides: dict[str, Any] | None = None,
             device: str = "cuda") -> list[BenchTask]:
    """The tasks under `paths` (levels filtered), loaded statically, in level then natural file order.

    `overrides` (`--set`) apply to the tasks that define the constant; a name no task defines is an error, as is
    a file that is not a KernelBench task."""
    if not paths:
        raise BenchInputError("no task directory or file given")
    files: list[Path] = []
    for path in paths:
        if not path.exists():
            raise BenchInputError(f"{path}: no such file or directory")
        if path.is_file() and path.suffix != ".py":
            raise BenchInputError(f"{path}: not a Python task file")
        found = _files_in(path)
        if levels is not None:
            found = [f for f in found if (lv := level_of(f)) != "unknown" and int(lv[5:]) in levels]
        if not found:
            wanted = f" for levels {','.join(map(str, sorted(levels)))}" if levels else ""
            raise BenchInputError(f"{path}: no tasks found{wanted} (expected KernelBench-format .py files, "
                                  "in level1, level2, ... folders)")
        files += found
    overrides = overrides or {}
    tasks: dict[str, BenchTask] = {}
    errors: list[str] = []
    used: set[str] = set()
    for f in files:
        level = level_of(f)
        key = f"{level}/{f.name}" if level != "unknown" else f.name
        if key in tasks:
            if tasks[key].path.resolve() == f.resolve():
                continue
            raise BenchInputError(f"{f}: same task key {key!r} as {tasks[key].path} (bench one of them at a time)")
        try:
            static = Task.load(f, device=device)
            mine = {k: v for k, v in overrides.items() if k in static.constants}
            used |= set(mine)
            tasks[key] = BenchTask(key, level, f, Task.load(f, mine, device=device) if mine else static, mine)
        except TaskError as exc:
            errors.append(str(exc))
    if errors:
        raise BenchInputError("not usable as tasks:\n  " + "\n  ".join(errors))
    unused = sorted(set(overrides) - used)
    if unused:
        raise BenchInputError(f"--set {', '.join(unused)}: no selected task defines that constant")
    return sorted(tasks.values(), key=lambda t: (_natural(t.level), _natural(t.path.name)))


def candidate_for(task: BenchTask, root: Path) -> Path | None:
    """`root/levelN/FILE.py` (mirrored layout), else `root/FILE.py` (a flat folder); None when neither exists."""
    for p in (root / task.key, root / task.path.name):
        if p.is_file():
            return p
    return None
