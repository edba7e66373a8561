"""`kernelsmith evolve` end to end on the CPU: a real HTTP model stand-in, the real referee, a real run database.

The stub answers by the prompt's (round, island), so the script is the same whatever order requests arrive in,
and it misbehaves the way real endpoints do: 429 with Retry-After, 500, answers past the timeout, prose with
no code, truncated output, broken programs. The run must survive all of it, keep improving, resume exactly
after SIGKILL, and never let the API key reach a candidate or the run's files.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, Reply

from kernelsmith.workshop.config import ConfigError

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "candidates" / "task_relu.py"
KEY = "sk-test-evolve-0123456789abcdef"

PROGRAM = '''import os
import torch
import torch.nn as nn
import triton
import triton.language as tl

# EVOLVE-BLOCK-START
if os.environ.get("OPENAI_API_KEY"):
    raise RuntimeError("API KEY VISIBLE TO CANDIDATE")


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0), mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, x.numel(), BLOCK={block})
        return y
# EVOLVE-BLOCK-END
'''


def good(block: int) -> str:
    return f"Here is a version with BLOCK={block}.\n```python\n{PROGRAM.replace('{block}', str(block))}```\n"


SCRIPT = {  # (round, island) -> what the "model" answers (after any scripted misbehaviour)
    (0, 0): good(256),
    (0, 1): "I would use a larger block size and vectorised loads.",  # prose, no code
    (1, 0): "```python\nclass ModelNew(nn.Module:\n```",  # broken program
    (1, 1): good(512),
    (2, 0): good(128),
    (2, 1): good(1024)[:300],  # truncated mid-program
}
MISBEHAVE = {(1, 1): Reply.error(429, "slow down", retry_after="1"), (2, 0): Reply.error(500, "boom"),
             (2, 1): Reply.delay(4.0, "late")}


class Responder:
    def __init__(self) -> None:
        self.seen: set[tuple[int, int]] = set()
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> Reply:
        text = body["messages"][-1]["content"]
        r, i = (int(x) for x in re.search(r"round (\d+), island (\d+)", text).groups())
        with self.lock:
            first = (r, i) not in self.seen
            self.seen.add((r, i))
        if first and (r, i) in MISBEHAVE:
            return MISBEHAVE[(r, i)]
        return Reply.ok(SCRIPT.get((r, i), good(64)), prompt_tokens=100, completion_tokens=50)


def write_config(tmp: Path, stub: OpenAIStub, run_dir: Path, rounds: int = 3) -> Path:
    cfg = tmp / f"{run_dir.name}.yaml"
    cfg.write_text(
        f"task: {TASK}\nrounds: {rounds}\npopulation: 2\nislands: 2\ndevice: cpu\neval_workers: 2\n"
        f"request_timeout_s: 2\nmax_retries: 3\nrun_dir: {run_dir}\nseed: 7\n"
        f"models:\n  - name: stub-model\n    base_url: {stub.base_url}\n    price_in_per_mtok: 1.0\n"
        f"    price_out_per_mtok: 2.0\n"
    )
    return cfg


def evolve_cmd(cfg: Path, *extra: str) -> list[str]:
    return [sys.executable, "-c", "from kernelsmith.cli import app; app()", "evolve", "--config", str(cfg), *extra]


def env_with_key() -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONUNBUFFERED": "1"}


def db_rows(run_dir: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(run_dir / "run.db") as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub(responder=Responder()) as s:
        yield s


@pytest.fixture(scope="module")
def full_run(stub: OpenAIStub, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("evolve")
    run_dir = tmp / "full"
    proc = subprocess.run(evolve_cmd(write_config(tmp, stub, run_dir)), env=env_with_key(), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir


def test_run_survives_misbehaviour_and_finds_a_correct_kernel(full_run: Path) -> None:
    summary = json.loads((full_run / "summary.json").read_text())
    assert summary["rounds_done"] == 3 and summary["best_status"] == "correct"
    assert summary["unusable_responses"] >= 3  # prose, broken program, truncated output
    assert summary["tokens"] > 0 and summary["cost_usd"] > 0
    best = (full_run / "best.py").read_text()
    assert "class ModelNew" in best and "EVOLVE-BLOCK-START" in best
    statuses = {s for (s,) in db_rows(full_run, "select status from verdicts")}
    assert "correct" in statuses and "compile_error" in statuses


def test_lineage_and_every_step_is_stored(full_run: Path) -> None:
    lineage = json.loads((full_run / "lineage.json").read_text())
    assert lineage and lineage[-1]["status"] == "correct" and "diff" in lineage[-1]
    n_prompts = db_rows(full_run, "select count(*) from prompts")[0][0]
    answers = db_rows(full_run, "select child, outcome from answers order by child")
    assert n_prompts == 6  # 3 rounds × 2 children
    # Each child's answer, kept under its name (a model error leaves none), with what became of it.
    assert {c for c, _ in answers} <= {f"r{r}c{i}" for r in range(3) for i in range(2)} and len(answers) >= 5
    assert {o for _, o in answers} <= {"program", "unusable", "duplicate"} and "unusable" in {o for _, o in answers}
    assert db_rows(full_run, "select count(*) from pending")[0][0] == 0


def test_api_key_reaches_neither_candidate_nor_run_files(full_run: Path, stub: OpenAIStub) -> None:
    assert any(r.headers.get("authorization") == f"Bearer {KEY}" for r in stub.requests)  # the key was used
    for (verdict,) in db_rows(full_run, "select verdict from verdicts"):
        assert "API KEY VISIBLE TO CANDIDATE" not in verdict
    for path in full_run.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


def test_replay_reproduces_the_programs_without_the_model(full_run: Path, tmp_path: Path) -> None:
    replay_dir = tmp_path / "replay"
    cfg = tmp_path / "replay.yaml"
    cfg.write_text((full_run / "config.yaml").read_text().replace(str(full_run), str(replay_dir)))
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(evolve_cmd(cfg, "--replay", str(full_run)), env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    q = "select name, digest from programs order by name"
    assert db_rows(replay_dir, q) == db_rows(full_run, q)


def test_sigkill_mid_round_then_resume_matches_uninterrupted(full_run: Path, stub: OpenAIStub,
                                                              tmp_path: Path) -> None:
    run_dir = tmp_path / "killed"
    cfg = write_config(tmp_path, stub, run_dir)
    proc = subprocess.Popen(evolve_cmd(cfg), env=env_with_key(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # kill once round 1 has started evaluating
        time.sleep(0.2)
        if (run_dir / "run.db").exists():
            try:
                if db_rows(run_dir, "select count(*) from programs where round >= 1")[0][0] >= 1:
                    break
            except sqlite3.Error:
                pass
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "summary.json").exists()
    done = subprocess.run(evolve_cmd(cfg, "--resume"), env=env_with_key(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    a = json.loads((full_run / "summary.json").read_text())
    b = json.loads((run_dir / "summary.json").read_text())
    assert b["archive_digest"] == a["archive_digest"]  # the archive is what it would have been
    q = "select p.name, p.digest, v.status from programs p join verdicts v on v.program_id = p.id order by p.name"
    assert db_rows(run_dir, q) == db_rows(full_run, q)
    assert db_rows(run_dir, "select count(*) from pending")[0][0] == 0
    prompts = "select child, hash from prompts order by child"  # each child's prompt recorded once
    assert db_rows(run_dir, prompts) == db_rows(full_run, prompts)


def test_token_budget_stops_the_run_cleanly(stub: OpenAIStub, tmp_path: Path) -> None:
    run_dir = tmp_path / "budget"
    cfg = write_config(tmp_path, stub, run_dir)
    cfg.write_text(cfg.read_text() + "max_total_tokens: 200\n")
    proc = subprocess.run(evolve_cmd(cfg), env=env_with_key(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "BudgetExhausted" in summary["stopped"] and summary["rounds_done"] == 1
    assert "stopped early" in proc.stdout


def test_no_model_says_what_to_configure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "from kernelsmith.cli import app; app()", "evolve", str(TASK), "--device", "cpu",
         "--proposer", "llm", "--run-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "needs a model" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()  # nothing half-made is left behind


def test_a_run_dir_is_run_by_one_process_at_a_time(tmp_path: Path) -> None:
    """A second process on a run dir in use is refused at start, naming the holder; the lock a `kill -9` left
    is taken over at once."""
    from kernelsmith.workshop.run import RunLock

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.db").touch()
    (run_dir / "config.yaml").write_text(f"task: {TASK}\ndevice: cpu\nproposer: offline\nrun_dir: {run_dir}\n")
    held = RunLock(run_dir)
    try:
        proc = subprocess.run(
            [sys.executable, "-c", "from kernelsmith.cli import app; app()", "evolve", "--run-dir", str(run_dir),
             "--resume"],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "another kernelsmith process is running this run" in proc.stderr + proc.stdout
        assert f"pid {os.getpid()}" in proc.stderr + proc.stdout
        assert "Traceback" not in proc.stderr
    finally:
        held.release()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from kernelsmith.workshop.run import RunLock; "
                               f"RunLock(__import__('pathlib').Path({str(run_dir)!r})); print('held', flush=True); "
                               "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError, match=f"pid {holder.pid}"):
            RunLock(run_dir)
    finally:
        holder.kill()  # SIGKILL: no clean-up ran
        holder.wait()
    RunLock(run_dir).release()  # the stale lock is taken over


def test_resume_takes_the_runs_own_settings(tmp_path: Path) -> None:
    """`--resume --run-dir D` needs nothing else: the task, device and population are the run's; more rounds are
    recorded; a flag that contradicts the run is refused before anything runs."""
    run_dir = tmp_path / "run"
    cli = [sys.executable, "-c", "from kernelsmith.cli import app; app()", "evolve"]
    first = subprocess.run(cli + [str(TASK), "--device", "cpu", "--proposer", "offline", "--rounds", "1",
                                  "--population", "1", "--run-dir", str(run_dir)],
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    rounds_before = db_rows(run_dir, "select count(distinct round) from programs")[0][0]
    refused = subprocess.run(cli + ["--resume", "--run-dir", str(run_dir), "--population", "3"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "'population' is 1 in this run, 3 asked" in refused.stderr + refused.stdout
    more = subprocess.run(cli + ["--resume", "--run-dir", str(run_dir), "--rounds", "2", "--device", "cpu"],
                          capture_output=True, text=True, timeout=600)
    assert more.returncode == 0, more.stdout + more.stderr
    assert db_rows(run_dir, "select count(distinct round) from programs")[0][0] == rounds_before + 1
    from kernelsmith.workshop.run import RUN_ID
    from kernelsmith.workshop.store import RunStore

    changes = RunStore(run_dir / "run.db").counter(RUN_ID, "settings_changes")
    assert changes[0]["changed"] == {"rounds": [1, 2]}
    assert "rounds: 2" in (run_dir / "config.yaml").read_text()
