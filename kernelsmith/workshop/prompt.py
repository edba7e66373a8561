"""Building the prompt for one proposal: reference, hardware, the parent with its full verdict, top and diverse
programs with their scores, recent failures with their errors, and the rules. Templates are editable files
(`templates/system.md`, `templates/user.md`; a run's `templates_dir` overrides them).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

TEMPLATES = Path(__file__).parent / "templates"
TEMPLATE_NAMES = ("system.md", "user.md")

RESPONSE_RULES = {
    "full": "Answer with the complete program in one ```python block, keeping the code outside "
            "`# EVOLVE-BLOCK-START` / `# EVOLVE-BLOCK-END` unchanged and rewriting what is inside.",
    "diff": "Answer with one or more edits to the code inside the EVOLVE-BLOCK, each as\n"
            "<<<<<<< SEARCH\n(exact lines of the current program)\n=======\n(new lines)\n>>>>>>> REPLACE",
}


class ProgramLike(Protocol):
    code: str
    score: float
    status: str
    speedup: float | None
    error: str


@dataclass(frozen=True)
class Prompt:
    messages: list[dict[str, str]]

    @property
    def digest(self) -> str:
        """Key of the response cache: same prompt, same response on replay."""
        return hashlib.sha256(json.dumps(self.messages, sort_keys=True).encode()).hexdigest()

    @property
    def text(self) -> str:
        return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in self.messages)


def load_templates(templates_dir: Path | None = None) -> dict[str, str]:
    """The two templates, each from `templates_dir` when it has one, else the shipped default."""
    out = {}
    for name in TEMPLATE_NAMES:
        custom = templates_dir / name if templates_dir else None
        out[name] = (custom if custom and custom.exists() else TEMPLATES / name).read_text()
    return out


def describe_verdict(v: dict[str, Any] | None) -> str:
    """The parent's verdict as the model should read it: what failed and where, or how fast and why."""
    if not v:
        return "Not evaluated yet."
    status = v.get("status", "?")
    lines = [f"Verdict: **{status}**."]
    if v.get("error"):
        lines.append(f"Why: {v['error']}")
    if v.get("speedup") is not None:
        lo, hi = v.get("speedup_ci") or (None, None)
        lines.append(f"Speedup over PyTorch: {v['speedup']:.3f}× (95% CI {lo:.3f}–{hi:.3f}); reference "
                     f"{v.get('ref_ms', 0):.4f} ms, this program {v.get('cand_ms', 0):.4f} ms "
                     f"({(v.get('timing') or {}).get('method', '')}).")
    elif status == "correct":
        lines.append("Correct (speed not measured on this device).")
    if v.get("max_abs_err") is not None and status in ("correct", "incorrect"):
        lines.append(f"Max abs error {v['max_abs_err']:.3g}, max error relative to output scale "
                     f"{v.get('max_rel_err') or 0:.3g}.")
    for g in v.get("guards", []):
        if g.get("severity") != "warn" or g.get("name") == "degenerate_task":
            lines.append(f"Referee finding `{g['name']}`: {g['message']}")
    if v.get("kernels"):
        lines.append("Kernels launched per forward run: " + ", ".join(f"{k}×{n}" for k, n in v["kernels"].items()))
    if status in ("compile_error", "runtime_error", "crashed") and v.get("log"):
        lines.append("Log (tail):\n```\n" + v["log"][-1500:] + "\n```")
    return "\n".join(lines)


def _program_list(title: str, programs: Sequence[ProgramLike]) -> str:
    if not programs:
        return ""
    parts = [f"\n## {title}"]
    for i, p in enumerate(programs, 1):
        speed = f"{p.speedup:.3f}×" if p.speedup is not None else "speed not measured"
        parts.append(f"### {i}. {p.status}, {speed}, score {p.score:.3f}\n```python\n{p.code}\n```")
    return "\n".join(parts) + "\n"


def _failures(programs: Sequence[ProgramLike]) -> str:
    if not programs:
        return ""
    parts = ["\n## Recent failed attempts (do not repeat these mistakes)"]
    for p in programs:
        parts.append(f"- {p.status}: {p.error[:400]}")
    return "\n".join(parts) + "\n"


def describe_hardware(hw: dict[str, Any]) -> str:
    keys = [("name", "GPU"), ("sm_count", "SMs"), ("memory_gb", "memory (GB)"), ("bandwidth_gbs",
            "memory bandwidth (GB/s)"), ("l2_mb", "L2 (MB)"), ("capability", "compute capability"),
            ("triton", "Triton"), ("torch", "PyTorch")]
    return "\n".join(f"- {label}: {hw[k]}" for k, label in keys if hw.get(k) is not None) or "- unknown"


def build_prompt(*, task_name: str, reference: str, parent_code: str, parent_verdict: dict[str, Any] | None,
                 top: Sequence[ProgramLike] = (), diverse: Sequence[ProgramLike] = (),
                 failures: Sequence[ProgramLike] = (), hardware: dict[str, Any] | None = None,
                 round_: int = 0, island: int = 0, response_mode: str = "full", policy: str = "strict",
                 templates: dict[str, str] | None = None, backend: str = "triton") -> Prompt:
    from kernelsmith.backends import get_backend

    templates = templates or load_templates()
    be = get_backend(backend)
    kernel = "Triton kernel" if backend == "triton" else f"{be.language} kernel of your extension"
    policy_note = "" if policy == "strict" else f" (torch operators are allowed, but at least one {kernel} must run)"
    system = templates["system.md"].format(
        language=be.language, backend_rules=be.prompt_notes,
        policy_note=policy_note, response_rules=RESPONSE_RULES[response_mode],
        tolerance_note="1e-3 (fp32), 1e-2 (fp16), 2e-2 (bf16) relative to the output's scale")
    instruction = ("Propose one improved version of the current program: faster, and correct. "
                   if parent_verdict and parent_verdict.get("status") == "correct"
                   else "Fix the current program first: make it correct under the rules, then fast. ")
    user = templates["user.md"].format(
        task_name=task_name, reference=reference.strip(), hardware=describe_hardware(hardware or {}),
        round=round_, island=island, parent_summary=describe_verdict(parent_verdict),
        parent_code=parent_code.strip(),
        inspirations=_program_list("Best programs so far", top) + _program_list("Different approaches", diverse),
        failures=_failures(failures), instruction=instruction + RESPONSE_RULES[response_mode])
    return Prompt([{"role": "system", "content": system}, {"role": "user", "content": user}])
