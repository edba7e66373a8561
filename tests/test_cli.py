"""The command line's answers: every bad input exits 2 with one line naming the file (and, under --json, a JSON
error object on stdout); a task's own failure is the task's, never a candidate's status; `evolve` says when
nothing was ever correct and how to resume after Ctrl-C."""

from __future__ import annotations

import json
import os
import pwd
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kernelsmith.cli import EXIT_BAD_INPUT, EXIT_CORRECT, EXIT_INTERRUPTED, EXIT_NOT_CORRECT, app

CANDIDATES = Path(__file__).parent / "candidates"
TASK_RELU = CANDIDATES / "task_relu.py"
GOOD_RELU = CANDIDATES / "good_relu.py"
CLI = [sys.executable, "-c", "from kernelsmith.cli import app; app()"]

TASK_TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        {forward}


batch_size = 8
dim = 300
scale = 0.5


def get_inputs():
    {inputs}


def get_init_inputs():
    return []
'''


def task_file(tmp_path: Path, name: str, forward: str = "return torch.relu(x)",
              inputs: str = "return [torch.randn(batch_size, dim)]") -> Path:
    path = tmp_path / name
    path.write_text(TASK_TEMPLATE.format(forward=forward, inputs=inputs))
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, user: str | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess:
    """The CLI in its own process (what a user runs); `timeout` only guards the test run against a hang."""
    cmd = [*CLI, *args]
    if user is not None:
        cmd = ["runuser", "-u", user, "--", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "80", **(env or {})})


def json_error(stdout: str) -> dict:
    obj = json.loads(stdout.strip().splitlines()[-1])
    assert {"error", "file", "kind"} <= set(obj), obj
    return obj


def assert_one_line_error(proc: subprocess.CompletedProcess | object, *needles: str, panel: bool = False) -> str:
    """Exit 2, no traceback, and exactly one `error:` line on stderr containing every needle; nothing else there
    but the device chosen (and, with `panel`, evolve's live panel, which comes before the line)."""
    stderr = proc.stderr
    code = proc.returncode if hasattr(proc, "returncode") else proc.exit_code
    assert code == EXIT_BAD_INPUT, (code, stderr)
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, stderr
    if not panel:
        assert len([line for line in stderr.splitlines() if line.strip() and not line.startswith("device:")]) == 1, \
            stderr
    assert stderr.rstrip().endswith(lines[0]), stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------------------ bad files, one line


def _bad_files(tmp: Path) -> dict[str, tuple[Path, str, str]]:
    """name -> (file, kind in the JSON error, text the line must contain)."""
    fifo = tmp / "pipe.py"
    os.mkfifo(fifo)
    latin = tmp / "latin.py"
    latin.write_bytes("x = 'caf\xe9'\n".encode("latin-1"))  # no coding line: not UTF-8
    big = tmp / "big.py"
    big.write_text("#" * ((1 << 20) + 1))
    nul = tmp / "nul.py"
    nul.write_bytes(b"import torch\0\n")
    cookie = tmp / "cookie.py"
    cookie.write_text("# -*- coding: no-such-codec -*-\n")
    return {
        "fifo": (fifo, "not_a_file", "a FIFO"),
        "dev_zero": (Path("/dev/zero"), "not_a_file", "a character device"),
        "directory": (tmp, "not_a_file", "a directory"),
        "missing": (tmp / "absent.py", "missing", "no such file"),
        "not_utf8": (latin, "encoding", "not valid utf-8"),
        "too_large": (big, "too_large", "1 MiB"),
        "nul_bytes": (nul, "encoding", "NUL"),
        "unknown_coding": (cookie, "encoding", "no-such-codec"),
    }


@pytest.mark.parametrize("name", ["fifo", "dev_zero", "directory", "missing", "not_utf8", "too_large", "nul_bytes",
                                  "unknown_coding"])
@pytest.mark.parametrize("role", ["task", "candidate"])
def test_a_bad_file_is_one_line_and_a_json_error(tmp_path: Path, name: str, role: str) -> None:
    path, kind, needle = _bad_files(tmp_path)[name]
    args = [str(path), str(GOOD_RELU)] if role == "task" else [str(TASK_RELU), str(path)]
    proc = run_cli("eval", *args, "--device", "cpu", "--json", timeout=120)  # a FIFO must not block the reader
    assert_one_line_error(proc, str(path), needle, f"cannot read {role} file" if kind != "encoding" else "")
    err = json_error(proc.stdout)
    assert (err["file"], err["kind"]) == (str(path), kind), err


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_an_unreadable_file_is_bad_input(tmp_path: Path) -> None:
    try:
        pwd.getpwnam("kstest")
    except KeyError:
        pytest.skip("no user kstest")
    secret = tmp_path / "secret_task.py"
    secret.write_text(TASK_RELU.read_text())
    secret.chmod(0o600)
    os.chmod(tmp_path, 0o755)
    proc = run_cli("eval", str(secret), str(GOOD_RELU), "--device", "cpu", "--json", user="kstest", timeout=120)
    assert_one_line_error(proc, str(secret), "cannot read task file")
    assert json_error(proc.stdout)["kind"] == "unreadable"


def test_config_and_seed_program_files_are_checked_before_a_run_dir_is_made(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_cli("evolve", str(TASK_RELU), "--device", "cpu", "--run-dir", str(run_dir), "--seed-program",
                   "/dev/zero", "--json", timeout=120)
    assert_one_line_error(proc, "/dev/zero", "candidate file")
    assert json_error(proc.stdout)["kind"] == "not_a_file"
    fifo = tmp_path / "run.yaml"
    os.mkfifo(fifo)
    proc = run_cli("evolve", str(TASK_RELU), "--device", "cpu", "--run-dir", str(run_dir), "--config", str(fifo),
                   timeout=120)
    assert_one_line_error(proc, str(fifo), "config file", "a FIFO")
    assert not run_dir.exists()


# ------------------------------------------------------------------------------------------ numbers and flags


@pytest.mark.parametrize(("flags", "needles"), [
    (["--timeout", "nan"], ["--timeout nan", "finite", "<= 86400"]),
    (["--timeout", "inf"], ["--timeout inf", "finite", "<= 86400"]),
    (["--timeout", "-1"], ["--timeout -1", "> 0"]),
    (["--timeout", "1e9"], ["--timeout", "<= 86400"]),
    (["--trials", "1000"], ["--trials 1000", "<= 100"]),
    (["--policy", "bogus"], ["--policy 'bogus'"]),
    (["--device", "tpu"], ["--device 'tpu'", "auto, cuda or cpu"]),
])
def test_out_of_range_flags_name_the_flag_and_the_limit(flags: list[str], needles: list[str]) -> None:
    result = CliRunner().invoke(app, ["eval", str(TASK_RELU), str(GOOD_RELU), "--device", "cpu", *flags, "--json"])
    assert_one_line_error(result, *needles)
    assert json.loads(result.stdout) == {"error": result.stderr.strip().removeprefix("error: "), "file": None,
                                         "kind": "bad_option"}


def test_a_flag_click_cannot_parse_is_one_line_too() -> None:
    proc = run_cli("eval", str(TASK_RELU), str(GOOD_RELU), "--trials", "abc", "--json", timeout=120)
    assert_one_line_error(proc, "--trials")
    assert json_error(proc.stdout)["kind"] == "usage"
    proc = run_cli("eval", str(TASK_RELU), str(GOOD_RELU), "--no-such-flag", timeout=120)
    assert_one_line_error(proc, "--no-such-flag", "(see: kernelsmith eval --help)")


@pytest.mark.parametrize(("setting", "needles"), [
    ("batch_size=abc", ["batch_size='abc'", "batch_size is int (8 in the task)", "expected an integer"]),
    ("batch_size=2.5", ["batch_size=2.5", "expected an integer"]),
    ("scale=nan", ["scale='nan'", "is float", "finite"]),
    ("scale=1e999", ["scale=inf", "finite"]),
    ("nosuch=1", ["cannot set nosuch", "known: batch_size, dim, scale"]),
])
def test_set_values_are_parsed_with_the_constants_type_before_any_child_starts(tmp_path: Path, setting: str,
                                                                              needles: list[str]) -> None:
    task = task_file(tmp_path, "sized_task.py")
    result = CliRunner().invoke(app, ["eval", str(task), str(GOOD_RELU), "--device", "cpu", "--set", setting,
                                      "--json"])
    assert_one_line_error(result, str(task), *needles)
    assert json.loads(result.stdout)["kind"] == "bad_override"


def test_yaml_numbers_are_finite_and_bounded(tmp_path: Path) -> None:
    cfg = tmp_path / "run.yaml"
    cfg.write_text("eval_timeout_s: .nan\nrounds: 1000000\n")
    result = CliRunner().invoke(app, ["evolve", str(TASK_RELU), "--device", "cpu", "--config", str(cfg),
                                      "--run-dir", str(tmp_path / "run"), "--json"])
    line = assert_one_line_error(result, str(cfg), "eval_timeout_s", "finite", "rounds", "<= 100000")
    assert json.loads(result.stdout) == {"error": line.removeprefix("error: "), "file": str(cfg),
                                         "kind": "bad_config"}
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------ valid Python accepted


def test_a_task_binding_model_by_import_and_latin1_sources_are_judged_on_the_device_there_is(tmp_path: Path) -> None:
    task = tmp_path / "imported_task.py"
    task.write_bytes(("# -*- coding: latin-1 -*-\n"
                      '"""Tâche: ReLU, Model bound by import."""\n'
                      "import torch\n"
                      "from torch.nn import ReLU as Model\n\n"
                      "batch_size = 8\ndim = 300\n\n\n"
                      "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\n\n"
                      "def get_init_inputs():\n    return []\n").encode("latin-1"))
    cand = tmp_path / "latin_candidate.py"
    cand.write_bytes(("# -*- coding: latin-1 -*-\n# Élan: the honest ReLU, saved as Latin-1\n"
                      + GOOD_RELU.read_text()).encode("latin-1"))
    proc = run_cli("eval", str(task), str(cand), "--json")  # --device auto: said once, on stderr
    assert proc.returncode == EXIT_CORRECT, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(proc.stdout)["status"] == "correct"
    here = "cuda" if torch.cuda.is_available() else "cpu"
    notes = [line for line in proc.stderr.splitlines() if line.startswith("device:")]
    assert len(notes) == 1 and notes[0].startswith(f"device: {here} ("), proc.stderr


# ------------------------------------------------------------------------------------------ the task's own failure


@pytest.mark.parametrize(("name", "forward", "inputs", "kind", "needles"), [
    ("raising_task.py", "return torch.relu(x)", "raise ValueError('no inputs today')", "error",
     ["ValueError: no inputs today"]),
    ("random_task.py", "return torch.relu(x)",
     "import os\n    return [torch.full((batch_size, dim), float(os.urandom(1)[0]) + os.urandom(1)[0] / 256)]",
     "inputs", ["not deterministic", "the referee seeds torch"]),
    ("huge_task.py", "return x.new_empty(1 << 20, 1 << 20) + batch_size", "return [torch.randn(batch_size, dim)]",
     "memory", ["memory", "try smaller ones, e.g. --set dim=150", "batch_size=8, dim=300"]),
])
def test_a_failing_task_is_the_tasks_fault_never_the_candidates(tmp_path: Path, name: str, forward: str,
                                                                inputs: str, kind: str,
                                                                needles: list[str]) -> None:
    task = task_file(tmp_path, name, forward, inputs)
    proc = run_cli("eval", str(task), str(GOOD_RELU), "--device", "cpu", "--json")
    assert_one_line_error(proc, str(task), "the task failed, not the candidate", *needles)
    err = json_error(proc.stdout)
    assert (err["kind"], err["file"]) == ("task_failed", str(task))
    verdict = err["verdict"]  # the referee's marker, not a parsed message: the status stays as it was
    assert (verdict["fault"], verdict["fault_kind"], verdict["status"]) == ("task", kind, "crashed"), verdict


def test_evolve_stops_before_the_run_when_the_task_fails(tmp_path: Path) -> None:
    task = task_file(tmp_path, "raising_task.py", inputs="raise ValueError('no inputs today')")
    run_dir = tmp_path / "run"
    proc = run_cli("evolve", str(task), "--device", "cpu", "--rounds", "3", "--population", "2", "--run-dir",
                   str(run_dir), "--json")
    assert_one_line_error(proc, str(task), "the task failed, not the candidate", "ValueError: no inputs today")
    assert json_error(proc.stdout)["kind"] == "task_failed"
    assert not run_dir.exists()  # nothing recorded against a candidate


def test_evolve_stops_when_the_task_fails_during_the_run(tmp_path: Path) -> None:
    """A reference that passes the check before the run (one call) but fails on its second call: the run stops
    at the task's failure (nothing was correct yet; no candidate is charged with it) and says so (exit 2)."""
    task = task_file(tmp_path, "flaky_task.py", forward="""_calls.append(x)
        if isinstance(x, torch.Tensor) and not x.is_meta and len(_calls) > 1:
            raise RuntimeError('the reference breaks on its second call')
        return torch.relu(x)""")
    task.write_text(task.read_text().replace("class Model", "_calls = []\n\n\nclass Model"))
    proc = run_cli("evolve", str(task), "--device", "cpu", "--rounds", "1", "--population", "1", "--run-dir",
                   str(tmp_path / "run"), "--json")
    assert_one_line_error(proc, "the task failed, not the candidate", "breaks on its second call",
                          "the run stopped; `--resume` evaluates that program again", panel=True)
    err = json_error(proc.stdout)
    assert err["kind"] == "task_failed" and err["summary"]["stopped"].startswith("TaskFailed"), err
    assert err["summary"]["best_status"] is None, err  # no verdict blamed a candidate


# ------------------------------------------------------------------------------------------ evolve's outcome


def test_evolve_without_a_correct_program_says_so_and_exits_1(tmp_path: Path) -> None:
    task = task_file(tmp_path, "fft_task.py", forward="return torch.fft.rfft(x).abs()")  # no offline template
    run_dir = tmp_path / "run"
    proc = run_cli("evolve", str(task), "--device", "cpu", "--rounds", "1", "--population", "1", "--run-dir",
                   str(run_dir), "--json")
    assert proc.returncode == EXIT_NOT_CORRECT, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "no correct program" in proc.stderr and "best attempt r0c0 (round 1)" in proc.stderr, proc.stderr
    assert "correct (cpu)" not in proc.stderr and "speedup None" not in proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)  # under --json, stdout is the summary alone
    assert summary["correct"] is False and summary["best_status"] != "correct"


def test_ctrl_c_says_how_to_resume(tmp_path: Path) -> None:
    run_dir = tmp_path / "run dir"
    # SIGINT as a terminal gives it: a suite started in the background by a non-interactive shell (`... &`) has
    # SIGINT ignored, which its children would inherit, and Python keeps an inherited SIG_IGN.
    proc = subprocess.Popen([*CLI, "evolve", str(TASK_RELU), "--device", "cpu", "--rounds", "10000", "--population",
                             "2", "--run-dir", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        while not (run_dir / "run.db").exists() and proc.poll() is None:
            try:
                proc.wait(0.2)
            except subprocess.TimeoutExpired:
                pass
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:  # keep what it said for the next look
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"evolve did not stop within 300 s of SIGINT; stderr:\n{err[-4000:]}\nstdout:\n{out[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_INTERRUPTED, (proc.returncode, err[-2000:], out[-1000:])
    assert f"resume with: kernelsmith evolve --resume --run-dir '{run_dir}'" in err, err[-2000:]
    assert "Traceback" not in err


def test_the_task_fault_marker_round_trips_and_old_verdicts_read_as_before() -> None:
    from kernelsmith.referee.verdict import Status, Verdict

    marked = Verdict(Status.CRASHED, error="the task's reference failed: x", fault="task", fault_kind="memory")
    again = Verdict.from_dict(json.loads(json.dumps(marked.to_dict())))
    assert again.task_fault and again.fault_kind == "memory" and again.status is Status.CRASHED
    old = Verdict.from_dict({"status": "crashed", "error": "the task's reference failed: x", "guards": []})
    assert not old.task_fault and old.fault == ""  # decided by the field, never by the message


def test_a_command_whose_extra_is_not_installed_says_which_extra() -> None:
    hidden = "import sys; sys.modules['uvicorn'] = None; from kernelsmith.cli import app; app()"  # as if not installed
    proc = subprocess.run([sys.executable, "-c", hidden, "serve", "--device", "cpu"], capture_output=True,
                          text=True, timeout=120)
    assert_one_line_error(proc, "'uvicorn'", "bash scripts/setup.sh service")


def test_serve_refuses_a_bad_service_setting_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELSMITH_MAX_FAULTS": "many"}
    proc = subprocess.run([*CLI, "serve", "--device", "cpu", "--db", str(tmp_path / "jobs.db")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert_one_line_error(proc, "max_faults")
