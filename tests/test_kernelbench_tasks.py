"""KernelBench as shipped, through the CLI: a task importing a module that is not installed is bad input in
one line (file, module, the extra that installs it), exit 2, before any child starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelsmith.cli import EXIT_BAD_INPUT, app

TASK = '''import torch
import torch.nn as nn
from einops import rearrange

class Model(nn.Module):
    def forward(self, x):
        return rearrange(x, "a b -> b a")

n = 4

def get_inputs():
    return [torch.randn(n, n)]

def get_init_inputs():
    return []
'''

CANDIDATE = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x.t()\n"


@pytest.mark.parametrize("command", ["eval", "evolve"])
def test_missing_extra_is_one_line_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    monkeypatch.setitem(sys.modules, "einops", None)  # as if the kernelbench extra were not installed
    task = tmp_path / "48_Mamba2.py"
    task.write_text(TASK)
    (tmp_path / "cand.py").write_text(CANDIDATE)
    args = [str(task), str(tmp_path / "cand.py")] if command == "eval" else [
        str(task), "--run-dir", str(tmp_path / "run"), "--rounds", "1", "--population", "1"]
    result = CliRunner().invoke(app, [command, *args, "--device", "cpu", "--set", "n=2"])
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    text = result.output.strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    assert f"{task}:3: the task imports einops, which is not installed" in text
    assert "bash scripts/setup.sh kernelbench" in text
    assert not (tmp_path / "run").exists()
