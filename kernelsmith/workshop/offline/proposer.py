"""The offline proposer: no model. Round zero translates the reference into a seed program (templates over a
torch.fx trace); every later child mutates its parent's launch configuration (block sizes, warps, stages).

Answers are ordinary responses (a fenced program), so the engine, the response cache, resume and replay treat
them exactly like a model's. In "mixed" mode the workshop alternates: model for structure, tuner for tuning.
"""

from __future__ import annotations

import random

from kernelsmith.workshop.prompt import Prompt
from kernelsmith.workshop.proposers import Proposal, ProposalContext, Proposer, charge

OFFLINE = "offline"


SEED_TIMEOUT_S = 300.0  # tracing and shape propagation; refusals come within seconds


def sandboxed_seed(task_source: str, task_path: str, timeout_s: float = SEED_TIMEOUT_S,
                   ) -> tuple[str | None, list[str], str]:
    """(seed source or None, template patterns, why not): `generate_seed` run in a referee sandbox on the CPU,
    since tracing the reference runs the task's code (`seed_child`). Only text comes back."""
    from kernelsmith.referee.sandbox import run_job

    job = {"source": task_source, "filename": task_path or "<task>"}
    data, outcome, log = run_job("kernelsmith.workshop.offline.seed_child", job, "cpu", timeout_s,
                                 report_limit=4 << 20)
    if data is None:
        why = ("it ran past its time limit" if outcome.timed_out else "it ran out of memory"
               if outcome.memory_exceeded else f"it ended without an answer: {' '.join(log.split())[-200:]}")
        return None, [], f"the seed generator's sandbox failed: {why}"
    source, patterns = data.get("source"), data.get("patterns")
    if data.get("ok") is True and isinstance(source, str) and isinstance(patterns, list):
        return source, [str(p)[:80] for p in patterns[:20]], ""
    return None, [], str(data.get("reason") or "no reason given")[:2000]


def _fenced(source: str, note: str) -> str:
    return f"{note}\n```python\n{source.rstrip()}\n```\n"


class OfflineProposer:
    def __init__(self, task_source: str, task_path: str, seed: int = 0):
        self.task_source, self.task_path, self.seed = task_source, task_path, seed
        self._seed_text: str | None = None

    def _seed_program(self) -> str:
        """The first Triton version of the reference (computed once); a clear note when no template fits."""
        if self._seed_text is None:
            source, patterns, why = sandboxed_seed(self.task_source, self.task_path)
            self._seed_text = (_fenced(source, f"Seed from templates: {', '.join(patterns)}.") if source else
                               f"The offline seed generator cannot translate this reference: {why}")
        return self._seed_text

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        from kernelsmith.workshop.offline.mutate import NothingToMutate, mutate

        if context is None or context.parent_code is None:
            return Proposal(self._seed_program(), OFFLINE)
        rng = random.Random(f"{self.seed}:{context.round}:{context.index}")
        try:
            m = mutate(context.parent_code, rng, n_changes=1 + rng.randrange(2))
        except NothingToMutate as exc:
            return Proposal(f"Nothing to tune: {exc}", OFFLINE)
        return Proposal(_fenced(m.source, "Tuned: " + "; ".join(m.changes)), OFFLINE)

    async def aclose(self) -> None:
        return None


class MixedProposer:
    """Even-numbered children from the model (structure), odd ones from the tuner (configuration)."""

    def __init__(self, model: Proposer, tuner: OfflineProposer):
        self.model, self.tuner = model, tuner

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        use_tuner = context is not None and context.parent_code is not None and context.index % 2 == 1
        return await (self.tuner if use_tuner else self.model).propose(prompt, key, context)

    def charge(self, tokens: int, cost_usd: float) -> None:
        charge(self.model, tokens, cost_usd)

    async def aclose(self) -> None:
        await self.model.aclose()

