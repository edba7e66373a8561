"""The prompt carries the structured feedback the recipe calls for, and templates are user-editable."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelsmith.workshop.prompt import build_prompt, load_templates


@dataclass
class P:
    code: str
    score: float
    status: str
    speedup: float | None
    error: str = ""


REF = "class Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
HW = {"name": "NVIDIA H200", "sm_count": 132, "bandwidth_gbs": 4300, "triton": "3.6.0"}


def test_failing_parent_shows_error_log_and_fix_instruction() -> None:
    verdict = {"status": "compile_error", "error": "CompilationError while running forward: arange must be pow2",
               "log": "Traceback ...\ntriton.compiler.errors.CompilationError: at 3:4", "guards": []}
    p = build_prompt(task_name="relu", reference=REF, parent_code="class ModelNew: ...", parent_verdict=verdict,
                     failures=[P("x", -3.0, "runtime_error", None, "IndexError: out of range")], hardware=HW)
    user = p.messages[1]["content"]
    assert "torch.relu(x)" in user and "NVIDIA H200" in user and "SMs: 132" in user
    assert "compile_error" in user and "arange must be pow2" in user and "CompilationError: at 3:4" in user
    assert "IndexError: out of range" in user and "Fix the current program first" in user
    assert "EVOLVE-BLOCK-START" in p.messages[0]["content"]


def test_correct_parent_shows_speed_and_inspirations() -> None:
    verdict = {"status": "correct", "speedup": 1.42, "speedup_ci": [1.40, 1.44], "ref_ms": 0.2, "cand_ms": 0.14,
               "timing": {"method": "eager+l2flush"}, "max_abs_err": 1e-6, "max_rel_err": 1e-7,
               "guards": [{"name": "unsandboxed", "message": "m", "severity": "warn"}],
               "kernels": {"relu_kernel": 6}}
    p = build_prompt(task_name="relu", reference=REF, parent_code="code", parent_verdict=verdict,
                     top=[P("TOPCODE", 2.0, "correct", 2.1)], diverse=[P("DIVCODE", 1.1, "correct", 1.05)],
                     response_mode="diff")
    user = p.messages[1]["content"]
    assert "1.420×" in user and "1.400–1.440" in user and "relu_kernel×6" in user
    assert "TOPCODE" in user and "DIVCODE" in user and "2.100×" in user
    assert "unsandboxed" not in user  # warnings about the referee's own setup are not the model's business
    assert "SEARCH" in user and "Propose one improved version" in user


def test_custom_templates_and_stable_digest(tmp_path: Path) -> None:
    (tmp_path / "system.md").write_text("You write kernels. {response_rules}{policy_note}{tolerance_note}")
    t = load_templates(tmp_path)
    assert t["system.md"].startswith("You write kernels.") and "## Reference" in t["user.md"]
    args = dict(task_name="t", reference=REF, parent_code="c", parent_verdict=None, templates=t)
    a, b = build_prompt(**args), build_prompt(**args)
    assert a.digest == b.digest and a.messages[0]["content"].startswith("You write kernels.")
    assert build_prompt(**{**args, "parent_code": "d"}).digest != a.digest
