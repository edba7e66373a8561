"""Every shipped task has a solution that the referee judges correct on the CPU (Triton interpreter)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelsmith.referee.evaluation import EvalOptions, evaluate
from kernelsmith.task import Task

ROOT = Path(__file__).resolve().parent.parent
TASKS = sorted((ROOT / "tasks").glob("level*/*.py"))


def solution_for(task: Path) -> Path:
    return ROOT / "solutions" / task.relative_to(ROOT / "tasks")


@pytest.fixture(scope="module")
def verdicts():
    opts = EvalOptions(device="cpu", timeout_s=240)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {t: pool.submit(evaluate, t, solution_for(t), opts) for t in TASKS}
        return {t: f.result() for t, f in futures.items()}


def test_at_least_twelve_tasks_across_levels() -> None:
    assert len(TASKS) >= 12
    assert {t.parent.name for t in TASKS} == {"level1", "level2", "level3"}
    assert all(solution_for(t).exists() for t in TASKS)


@pytest.mark.parametrize("task", TASKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_solution_is_correct_on_cpu(task: Path, verdicts) -> None:
    v = verdicts[task]
    assert v.status.value == "correct", f"{v.status.value}: {v.error}\n{v.log[-2000:]}"
    assert v.kernels and not [g for g in v.guards if g.severity.value != "warn"]
    assert v.trials >= 5
    assert v.speedup is None  # not measured on the CPU


@pytest.mark.parametrize("task", TASKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_task_has_gpu_and_cpu_sizes(task: Path) -> None:
    gpu, cpu = Task.load(task, device="cuda"), Task.load(task, device="cpu")
    assert cpu.overrides, "a shipped task declares CPU_OVERRIDES"
    assert gpu.source != cpu.source
