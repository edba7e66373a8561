"""`kernelsmith evolve` with no model: the offline proposer seeds from the reference and tunes from there."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelsmith.workshop.offline.proposer import MixedProposer, OfflineProposer
from kernelsmith.workshop.prompt import Prompt
from kernelsmith.workshop.proposers import Proposal, ProposalContext

ROOT = Path(__file__).resolve().parent.parent


def evolve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from kernelsmith.cli import app; app()", "evolve", *args],
                          capture_output=True, text=True, timeout=900)


def test_offline_run_from_a_seed_program_stays_correct(tmp_path: Path) -> None:
    run = tmp_path / "run"
    proc = evolve(str(ROOT / "tasks/level1/05_softmax.py"), "--device", "cpu", "--rounds", "2", "--population", "2",
                  "--seed-program", str(ROOT / "solutions/level1/05_softmax.py"), "--run-dir", str(run))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["best_status"] == "correct" and summary["tokens"] == 0 and summary["rounds_done"] == 2
    lineage = json.loads((run / "lineage.json").read_text())
    assert lineage[0]["id"] == "seed"


class _Model:
    def __init__(self) -> None:
        self.calls = 0

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        self.calls += 1
        return Proposal("from the model", "m")

    async def aclose(self) -> None:
        return None


def test_mixed_mode_alternates_model_and_tuner() -> None:
    parent = (ROOT / "solutions/level1/01_relu.py").read_text()
    model = _Model()
    mixed = MixedProposer(model, OfflineProposer("", "", seed=1))
    prompt = Prompt([{"role": "user", "content": "x"}])

    async def go() -> list[Proposal]:
        return [await mixed.propose(prompt, f"r1c{i}", ProposalContext(parent, 1, i % 2, i)) for i in range(4)]

    out = asyncio.run(go())
    assert [p.model for p in out] == ["m", "offline", "m", "offline"] and model.calls == 2
    assert "Tuned:" in out[1].text and "```python" in out[1].text


def test_the_seed_is_traced_in_a_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing the reference runs the task's code: it runs in a referee sandbox, where the orchestrator's secrets
    and files are out of reach; only the seed's text comes back."""
    from kernelsmith.workshop.offline.proposer import sandboxed_seed

    monkeypatch.setenv("OPENAI_API_KEY", "sk-seed-sandbox-0123456789")
    marker = tmp_path / "escaped"
    source = f'''import os
import torch
import torch.nn as nn

if os.environ.get("OPENAI_API_KEY"):
    raise RuntimeError("the key is visible to the task")
try:
    open({str(marker)!r}, "w").write("out")
except OSError:
    pass


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''
    got = sandboxed_seed(source, str(tmp_path / "task.py"))
    assert got.source is not None and "ModelNew" in got.source, got.why
    assert got.patterns and not marker.exists() and got.alternates == []
    got = sandboxed_seed("import torch\nraise SystemExit(3)\n", str(tmp_path / "bad.py"))
    assert got.source is None and ("bad.py" in got.why or "without an answer" in got.why), got.why


def test_round_zero_measures_every_seed_before_tuning(tmp_path: Path) -> None:
    """Under lenient a convolution model's round 0 is the cuDNN-convolution seed, the Triton one, then
    configurations of the first: the search measures both seeds (on the H200 either can be the faster)."""
    from test_compiler_lenient import CONV_RELU

    task = tmp_path / "conv_relu.py"
    task.write_text(CONV_RELU)
    proposer = OfflineProposer(CONV_RELU, str(task), seed=3, policy="lenient")
    prompt = Prompt([{"role": "user", "content": "x"}])

    async def go() -> list[Proposal]:
        return [await proposer.propose(prompt, f"r0c{i}", ProposalContext(None, 0, 0, i)) for i in range(3)]

    first, second, third = (p.text for p in asyncio.run(go()))
    assert first.startswith("Seed from templates: elementwise; conv left to torch (cuDNN).")
    assert second.startswith("Another seed from templates: library:conv, elementwise.")
    assert "_ks_attr(self, 'conv')(x)" in first and "_ks_attr(self, 'conv')(x)" not in second
    assert third.startswith("Tuned: ") and "_ks_attr(self, 'conv')(x)" in third  # a configuration of the first
    strict = OfflineProposer(CONV_RELU, str(task), seed=3, policy="strict")
    one = asyncio.run(strict.propose(prompt, "r0c1", ProposalContext(None, 0, 0, 1))).text
    assert one.startswith("Tuned: ")


UNTRACEABLE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A recurrent cell stepped in Python over the sequence: torch.fx cannot trace `range(x.size(1))`."""

    def __init__(self):
        super().__init__()
        self.i2h = nn.Linear(12, 8)
        self.out = nn.Linear(8, 5)

    def forward(self, x):
        h = torch.zeros(x.size(0), 8, device=x.device)
        for t in range(x.size(1)):
            h = torch.tanh(self.i2h(torch.cat([x[:, t], h], dim=1)))
        return torch.relu(self.out(h))


def get_inputs():
    return [torch.randn(3, 4, 4)]


def get_init_inputs():
    return []
'''


def test_a_forward_fx_cannot_trace_is_seeded_from_its_module_calls(tmp_path: Path) -> None:
    """Under lenient the compiler's refusal of the whole forward is not the end: the model's module calls are
    extracted with their real shapes, seeded one by one and assembled into one program (the forward's Python
    stays), which the referee finds correct with Triton kernels launched. Strict still refuses, by the line."""
    from kernelsmith.referee.evaluation import EvalOptions, evaluate

    task = tmp_path / "rnn.py"
    task.write_text(UNTRACEABLE)
    prompt = Prompt([{"role": "user", "content": "x"}])
    text = asyncio.run(OfflineProposer(UNTRACEABLE, str(task), policy="lenient").propose(
        prompt, "r0c0", ProposalContext(None, 0, 0, 0))).text
    assert text.startswith("Seed from the model's module calls"), text[:500]
    assert re.search(r"rnn\.py:1[45]: ", text.splitlines()[0])  # why the whole forward is not, with its line
    cand = tmp_path / "seed.py"
    cand.write_text(text.split("```python\n", 1)[1].rsplit("```", 1)[0])
    v = evaluate(task, cand, EvalOptions(device="cpu", timeout_s=240, policy="lenient"))
    assert v.status.value == "correct" and v.kernels, f"{v.status.value}: {v.error}\n{v.log[-3000:]}"
    strict = asyncio.run(OfflineProposer(UNTRACEABLE, str(task), policy="strict").propose(
        prompt, "r0c0", ProposalContext(None, 0, 0, 0))).text
    assert strict.startswith("The offline seed generator cannot translate this reference")
    assert re.search(r"rnn\.py:1[45]: ", strict) and "module calls" not in strict
