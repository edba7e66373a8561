"""Exact runs: a run killed anywhere and resumed (or replayed) records what the uninterrupted run records, program
by program, whatever the population, islands and proposer (tests/resume_driver.py does the killing).

The model is a real HTTP server speaking OpenAI's protocol. It answers by the request's sampling seed and prompt,
as a seeded vLLM would: siblings that share a prompt get different answers — good programs (often the same one:
duplicates), wrong ones, broken ones and prose — which is exactly where a cache keyed by prompt lost programs.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from openai_stub import OpenAIStub, Reply

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, {body}, mask=m)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), {block}),)](x, y, x.numel(), BLOCK={block}, num_warps={warps})
        return y
'''
GOOD = "tl.maximum(tl.load(x_ptr + offs, mask=m), 0.0)"
WRONG = "tl.load(x_ptr + offs, mask=m)  # WRONG: no ReLU"


def answer(body: dict) -> Reply:
    """A deterministic function of (sampling seed, prompt): what a seeded model server gives."""
    assert "seed" in body, "the client must send a per-child sampling seed"
    h = hashlib.sha256(f"{body['seed']}|{body['messages'][-1]['content']}".encode()).digest()
    pick, block = h[0] % 20, (32, 64, 128, 256, 512, 1024)[h[1] % 6]
    warps = (1, 2, 4, 8)[h[4] % 4]
    if pick < 12:
        text = f"Block {block}.\n```python\n{TEMPLATE.format(body=GOOD, block=block, warps=warps)}```\n"
    elif pick < 14:
        text = f"```python\n{TEMPLATE.format(body=WRONG, block=block, warps=warps)}```\n"
    elif pick < 17:
        text = "```python\nclass ModelNew(nn.Module:\n    pass\n```\n"  # broken: a compile error
    else:
        text = "I would try a larger block and vectorised loads."  # prose: unusable
    return Reply.ok(text, prompt_tokens=100 + h[2], completion_tokens=50 + h[3])


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub(responder=answer) as s:
        yield s


def trials(stub: OpenAIStub, tmp_path: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "resume_driver.py"), "--base-url", stub.base_url,
                           "--out", str(tmp_path), *args], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("population,proposer,seed", [(4, "llm", 1), (8, "llm", 2), (4, "mixed", 3)])
def test_killed_anywhere_resumes_to_the_uninterrupted_run(stub: OpenAIStub, tmp_path: Path, population: int,
                                                          proposer: str, seed: int) -> None:
    out = trials(stub, tmp_path, "--population", str(population), "--islands", "2", "--proposer", proposer,
                 "--trials", "6", "--seed", str(seed))
    assert "error" not in out, out
    ref = out["uninterrupted"]
    assert ref["rounds_done"] == 4 and ref["programs"] >= 4  # a real run: programs of every kind
    assert ref["duplicates"] > 0 and ref["unusable_responses"] > 0 and ref["best_status"] == "correct"
    assert any(s == "killed" for t in out["trials"] for s in t["steps"])
    assert out["differences"] == {}, json.dumps(out, indent=1)[:6000]


def test_the_budget_counts_what_was_spent_before_a_resume(stub: OpenAIStub, tmp_path: Path) -> None:
    """A run with a token budget, killed and resumed, stops on the same budget: the resumed process starts from
    what the run had spent, not from zero (it used to spend the whole budget again)."""
    budget = 3000
    out = trials(stub, tmp_path, "--population", "4", "--islands", "2", "--rounds", "8", "--trials", "4",
                 "--seed", "4", "--max-tokens", str(budget))
    assert "error" not in out, out
    ref = out["uninterrupted"]
    assert "BudgetExhausted" in ref["stopped"] and ref["rounds_done"] < 8
    per_round = 4 * (100 + 255 + 50 + 255)  # at most a round's answers were in flight when it ran out
    for t in out["trials"]:
        assert budget <= t["summary"]["tokens"] <= budget + per_round, t
    assert out["differences"] == {}, json.dumps(out, indent=1)[:6000]


def test_a_task_that_fails_stops_the_run_and_a_resume_judges_again(tmp_path: Path) -> None:
    """The task's own failure before anything is correct stops the run (never recorded as every candidate's
    verdict); its program stays pending, so a resume, the task healthy again, evaluates it."""
    sys.path.insert(0, str(ROOT / "tests"))
    from resume_driver import TASK, judge

    from kernelsmith.workshop.config import RunConfig
    from kernelsmith.workshop.run import evolve
    from kernelsmith.workshop.store import RunStore

    cfg = RunConfig(task=TASK, rounds=2, population=2, islands=1, device="cpu", proposer="offline",
                    run_dir=tmp_path / "run", seed=3)
    failed = {"status": "crashed", "correct": False, "fault": "task", "fault_kind": "memory",
              "error": "the task's reference failed: CUDA out of memory", "guards": []}
    summary = evolve(cfg, judge=lambda candidate: failed)
    first_elapsed = summary["elapsed_s"]
    assert summary["stopped"].startswith("TaskFailed") and summary["task_failure"]["fault_kind"] == "memory"
    assert summary["rounds_done"] == 0 and summary["best_id"] is None
    with RunStore(cfg.run_dir / "run.db") as store:
        assert store.pending("main") and not any(p["verdict"] for p in store.programs("main"))
    summary = evolve(cfg, resume=True, judge=judge)
    assert summary["rounds_done"] == 2 and summary["best_status"] == "correct" and not summary["stopped"]
    assert summary["elapsed_s"] >= first_elapsed  # the time of both processes, not the last one's alone
    with RunStore(cfg.run_dir / "run.db") as store:
        assert not store.pending("main")
