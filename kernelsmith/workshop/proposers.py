"""Where the next program comes from: a language model (OpenAI-compatible), the offline tuner, or the run's own
record of what each child was answered (resume) or a recorded run's (replay).

Every proposer answers `await propose(prompt, child, context)` with a `Proposal`. `CachedProposer` puts the run's
answers in front of any proposer, keyed by the child's name ("r3c1"), never by the prompt: siblings often share a
prompt, and each must get back exactly its own answer. A resumed run asks the model nothing it already asked, and
a replay asks nothing at all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelsmith.workshop.config import RunConfig
from kernelsmith.workshop.offline.proposer import MixedProposer, OfflineProposer
from kernelsmith.workshop.prompt import Prompt
from kernelsmith.workshop.proposal import Proposal, ProposalContext, Proposer, charge

__all__ = ["CachedProposer", "LLMProposer", "Proposal", "ProposalContext", "Proposer", "ProposerUnavailable",
           "ReplayMiss", "RunDiverged", "charge", "make_proposer"]


class ProposerUnavailable(RuntimeError):
    """No proposer can be built from this configuration; the message says what to configure."""


class RunDiverged(RuntimeError):
    """A child's prompt is not the one its recorded answer was given for: the run would no longer be exact."""


class ReplayMiss(RunDiverged):
    """A replay met a child the recorded run never answered, or whose prompt differs from the recorded one."""


class LLMProposer:
    """The configured model ensemble through `LLMClient` (built lazily inside the running event loop)."""

    def __init__(self, config: RunConfig):
        from kernelsmith.workshop.llm import Budget, LLMClient, ModelSpec

        specs = [ModelSpec(name=m.name, base_url=m.base_url, api_key_env=m.api_key_env, weight=m.weight,
                           temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens,
                           timeout_s=config.request_timeout_s, max_retries=config.max_retries,
                           price_in_per_mtok=m.price_in_per_mtok, price_out_per_mtok=m.price_out_per_mtok)
                 for m in config.models]
        self.budget = Budget(config.max_total_tokens, config.max_cost_usd)
        self.client = LLMClient(specs, concurrency=config.concurrency, budget=self.budget, seed=config.seed)

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        c = await self.client.complete(prompt.messages, rng_key=key)
        return Proposal(c.text, c.model, c.prompt_tokens, c.completion_tokens, c.cost_usd)

    def charge(self, tokens: int, cost_usd: float) -> None:
        self.budget.add(tokens, cost_usd)

    async def aclose(self) -> None:
        await self.client.aclose()


Lookup = Callable[[str], "dict[str, Any] | None"]  # child name -> {"text", "model", "prompt_hash", "usage", ...}


class CachedProposer:
    """Answers each child from the run's own answers by the child's name; a child never answered is answered from
    `recorded` (a replay: a recorded run's answers, copied into this run) or else by `inner` (the model), and the
    answer is recorded before anything is made of it. An answer recorded for another prompt than the child's now
    means the run has diverged from its record: `RunDiverged` (`ReplayMiss` in a replay), never a silent mix."""

    def __init__(self, inner: Proposer | None, lookup: Lookup,
                 record: Callable[[str, str, Proposal], None], recorded: Lookup | None = None):
        self.inner, self.lookup, self.record, self.recorded = inner, lookup, record, recorded

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        own = self.lookup(key)
        if own is not None:
            _check(own, prompt, key, RunDiverged, "this run recorded")
            proposal = _proposal(own, spent=bool(own.get("spent", True)))
            if proposal.spent:  # paid for before a resume: counts against the budget again in this process
                charge(self.inner, proposal.tokens, proposal.cost_usd)
            return proposal
        if self.recorded is not None:
            hit = self.recorded(key)
            if hit is None:
                raise ReplayMiss(f"replay: the recorded run never answered {key} (prompt {prompt.digest[:12]})")
            _check(hit, prompt, key, ReplayMiss, "the recorded run sent")
            proposal = _proposal(hit, spent=False)
            self.record(key, prompt.digest, proposal)
            return proposal
        if self.inner is None:
            raise ReplayMiss(f"replay: no recorded answer for {key} (prompt {prompt.digest[:12]})")
        proposal = await self.inner.propose(prompt, key, context)
        self.record(key, prompt.digest, proposal)
        return proposal

    def charge(self, tokens: int, cost_usd: float) -> None:
        charge(self.inner, tokens, cost_usd)

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()


def _check(hit: dict[str, Any], prompt: Prompt, key: str, error: type[RunDiverged], whose: str) -> None:
    recorded = hit.get("prompt_hash")
    if recorded and recorded != prompt.digest:
        raise error(f"{key}: its prompt ({prompt.digest[:12]}) is not the one {whose} ({str(recorded)[:12]}); "
                    "the task, the templates or the settings that shape prompts changed since")


def _proposal(hit: dict[str, Any], *, spent: bool) -> Proposal:
    usage = hit.get("usage") or {}
    return Proposal(hit["text"], hit.get("model") or "", int(usage.get("prompt_tokens", 0) or 0),
                    int(usage.get("completion_tokens", 0) or 0), float(usage.get("cost_usd", 0.0) or 0.0),
                    cached=True, spent=spent)


def make_proposer(config: RunConfig, task_source: str = "", task_path: str = "") -> Proposer:
    """The configured proposer: the model ensemble, the offline seed-and-tune proposer, or both alternating."""
    kind = config.proposer
    if kind == "auto":
        kind = "llm" if config.models else "offline"
    if kind in ("llm", "mixed") and not config.models:
        raise ProposerUnavailable(
            f"proposer {kind!r} needs a model: give --model NAME (and --base-url URL for vLLM, SGLang, LMDeploy or "
            "Ollama), or a config file with `models:`")
    if kind == "llm":
        return LLMProposer(config)
    tuner = OfflineProposer(task_source, task_path, config.seed, policy=config.policy,
                            precision=getattr(config, "precision", None), backend=config.backend)
    return tuner if kind == "offline" else MixedProposer(LLMProposer(config), tuner)
