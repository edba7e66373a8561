"""Fault suite: every way a candidate can break becomes one verdict status with a message that says why, the
referee survives it (the next honest evaluation is still correct, no process is left behind), and bad input
to `Task.load` / `kernelsmith eval` is a one-line error with exit code 2, never a traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CANDIDATES, TASK_RELU, EvalPool, Job, leftover_workers, needed_jobs
from typer.testing import CliRunner

from kernelsmith.cli import EXIT_BAD_INPUT, app
from kernelsmith.referee.sandbox import Limits
from kernelsmith.referee.verdict import Status
from kernelsmith.task import Task, TaskError

CRASHERS = ("segfault", "exit", "hang", "memory")

JOBS = [
    Job("syntax", "fault_syntax.py"),
    Job("import", "fault_import.py"),
    Job("no_modelnew", "fault_no_modelnew.py"),
    Job("init", "fault_init.py"),
    Job("forward", "fault_forward.py"),
    Job("triton_arange", "fault_triton_arange.py"),
    Job("triton_undefined", "fault_triton_undefined.py"),
    Job("segfault", "fault_segfault.py"),
    Job("exit", "fault_exit.py"),
    Job("hang", "fault_hang.py", options={"timeout_s": 20.0}),
    Job("memory", "fault_memory.py", options={"limits": Limits(memory_mb=3000)}),
    Job("broken_task", "good_relu.py", task=CANDIDATES / "task_broken.py"),
    Job("good_after_crashes", "good_relu.py", after=CRASHERS),
]

# (job, status, substrings the one-line error must contain, substrings the log must contain)
FAULTS = [
    ("syntax", Status.COMPILE_ERROR, ["SyntaxError", "importing the candidate", "line 6"], ["def forward(self, x)"]),
    ("import", Status.COMPILE_ERROR, ["No module named 'kernelsmith_no_such_module_xyz'"], ["ModuleNotFoundError"]),
    ("no_modelnew", Status.COMPILE_ERROR, ["no class ModelNew"], []),
    ("init", Status.RUNTIME_ERROR, ["ValueError", "constructing ModelNew", "boom-in-init"], ["candidate.py", "line 8"]),
    ("forward", Status.RUNTIME_ERROR, ["RuntimeError", "running forward", "boom-in-forward"], ["line 19"]),
    ("segfault", Status.CRASHED, ["SIGSEGV"], []),
    ("exit", Status.CRASHED, ["code 7"], []),
    ("hang", Status.TIMEOUT, ["time limit"], []),
    ("memory", Status.CRASHED, ["memory limit"], []),
    ("broken_task", Status.CRASHED, ["the task's reference failed", "task-broken"], []),
]


@pytest.fixture(scope="module")
def pool(request: pytest.FixtureRequest):
    p = EvalPool("faults", JOBS, needed_jobs(request))
    yield p
    p.close()


@pytest.mark.parametrize(("case", "status", "in_error", "in_log"), FAULTS, ids=[f[0] for f in FAULTS])
def test_fault_gives_status_and_message(pool: EvalPool, case: str, status: Status, in_error: list[str],
                                        in_log: list[str]) -> None:
    v = pool.verdict(case)
    assert v.status is status, f"{case}: {v.status.value}: {v.error}\n{v.log[-2000:]}"
    for text in in_error:
        assert text in v.error, f"{case}: {text!r} not in error {v.error!r}"
    for text in in_log:
        assert text in v.log, f"{case}: {text!r} not in log"
    assert "\n" not in v.error.strip()
    assert v.speedup is None and not v.correct


@pytest.mark.uses("hang")
def test_timeout_is_enforced_promptly(pool: EvalPool) -> None:
    v = pool.verdict("hang")
    assert 19.0 <= v.elapsed_s <= 30.0, v.elapsed_s


@pytest.mark.uses("memory")
def test_memory_limit_reports_resident_size(pool: EvalPool) -> None:
    v = pool.verdict("memory")
    mb = float(v.error.split("(")[1].split()[0])  # "... exceeded its memory limit (3002 MB resident)"
    assert 3000 <= mb < 3000 + 1100  # killed within about one 1 GiB step of the limit


@pytest.mark.parametrize(("case", "message"), [("triton_arange", "power of 2"), ("triton_undefined", "relu_no_such_fn")])
def test_triton_build_error_message(pool: EvalPool, case: str, message: str) -> None:
    v = pool.verdict(case)
    assert v.status in (Status.COMPILE_ERROR, Status.RUNTIME_ERROR), v.status
    assert message in v.error
    assert "candidate.py" in v.log  # the traceback points into the candidate's launch


@pytest.mark.parametrize("case", ["triton_arange", "triton_undefined"])
def test_triton_build_error_is_compile_error(pool: EvalPool, case: str) -> None:
    assert pool.verdict(case).status is Status.COMPILE_ERROR


@pytest.mark.uses("good_after_crashes", *CRASHERS)
def test_referee_survives_crashes(pool: EvalPool) -> None:
    """After a segfault, an os._exit, a timeout and a memory kill, the next honest evaluation is correct."""
    for case in CRASHERS:
        assert pool.verdict(case).status in (Status.CRASHED, Status.TIMEOUT)
    v = pool.verdict("good_after_crashes")
    assert v.status is Status.CORRECT, v.error + "\n" + v.log
    assert v.trials == 5


@pytest.mark.uses(*[j.name for j in JOBS])
def test_no_worker_outlives_its_evaluation(pool: EvalPool) -> None:
    for job in JOBS:
        pool.verdict(job.name)
    left = leftover_workers()
    assert not left, f"worker processes alive after their evaluation: {left}"


# --------------------------------------------------------------------------------------------------------
# Bad input: Task.load and the CLI


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_task_load_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "no_such_task.py"
    with pytest.raises(TaskError, match="no_such_task.py") as info:
        Task.load(path)
    assert "cannot read" in str(info.value)


def test_task_load_syntax_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "broken_task.py", "import torch\nclass Model(\n")
    with pytest.raises(TaskError, match="broken_task.py") as info:
        Task.load(path)
    assert "syntax error" in str(info.value) and ":2:" in str(info.value)


def test_task_load_without_model(tmp_path: Path) -> None:
    path = _write(tmp_path / "modelless_task.py", "def get_inputs():\n    return []\n\n"
                                                  "def get_init_inputs():\n    return []\n")
    with pytest.raises(TaskError, match="modelless_task.py") as info:
        Task.load(path)
    assert "missing Model" in str(info.value)


def test_task_load_unknown_override() -> None:
    with pytest.raises(TaskError, match="task_relu.py") as info:
        Task.load(TASK_RELU, {"nosuch": 1})
    assert "nosuch" in str(info.value) and "batch_size" in str(info.value)  # names what can be set


def _bad_inputs(tmp: Path) -> dict[str, tuple[list[str], str]]:
    good = str(CANDIDATES / "good_relu.py")
    task = str(TASK_RELU)
    syntax = str(_write(tmp / "syntax_task.py", "class Model(\n"))
    modelless = str(_write(tmp / "modelless_task.py", "x = 1\n"))
    return {  # name -> (arguments after `eval`, text the error must contain)
        "missing_task": ([str(tmp / "absent_task.py"), good], "absent_task.py"),
        "task_syntax": ([syntax, good], "syntax_task.py"),
        "task_without_model": ([modelless, good], "missing Model"),
        "missing_candidate": ([task, str(tmp / "absent_cand.py")], "absent_cand.py"),
        "unknown_set": ([task, good, "--set", "nosuch=1"], "nosuch"),
        "malformed_set": ([task, good, "--set", "=1"], "NAME=VALUE"),
        "bogus_policy": ([task, good, "--policy", "bogus"], "bogus"),
        "bogus_device": ([task, good, "--device", "tpu"], "tpu"),
        "zero_trials": ([task, good, "--device", "cpu", "--trials", "0"], "trials"),
        "negative_timeout": ([task, good, "--device", "cpu", "--timeout", "-1"], "timeout"),
    }


BAD_INPUT_NAMES = ["missing_task", "task_syntax", "task_without_model", "missing_candidate", "unknown_set",
                   "malformed_set", "bogus_policy", "bogus_device", "zero_trials", "negative_timeout"]


@pytest.mark.parametrize("name", BAD_INPUT_NAMES)
def test_cli_bad_input_exits_2_without_traceback(tmp_path: Path, name: str) -> None:
    args, expected = _bad_inputs(tmp_path)[name]
    result = CliRunner().invoke(app, ["eval", *args])
    assert result.exit_code == EXIT_BAD_INPUT, (result.exit_code, result.output, result.exception)
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    squeeze = "".join  # rich may wrap (or fold) the line: compare with all whitespace removed
    assert squeeze(expected.split()) in squeeze(result.stderr.split()), result.stderr


def test_cli_bad_input_error_is_one_line(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / "absent_task.py"
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-c", "from kernelsmith.cli import app; app()", "eval", str(deep),
                           str(CANDIDATES / "good_relu.py"), "--device", "cpu"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    assert str(deep) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
