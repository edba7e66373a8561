"""Where the next program comes from: a language model (OpenAI-compatible), a run's response cache (replay).

Every proposer answers `await propose(prompt, key)` with a `Proposal`. `CachedProposer` puts the run's
response cache in front of any proposer: a resumed run asks the model nothing it already asked, and a replay
asks nothing at all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kernelsmith.workshop.config import RunConfig
from kernelsmith.workshop.prompt import Prompt


class ProposerUnavailable(RuntimeError):
    """No proposer can be built from this configuration; the message says what to configure."""


class ReplayMiss(RuntimeError):
    """A replay met a prompt that the recorded run never sent."""


@dataclass(frozen=True)
class ProposalContext:
    """What a proposer that does not read prompts (the offline tuner) needs: the parent and where it stands."""

    parent_code: str | None
    round: int
    island: int
    index: int


@dataclass(frozen=True)
class Proposal:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "model": self.model, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": self.cost_usd}


class Proposer(Protocol):
    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal: ...

    async def aclose(self) -> None: ...


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

    async def aclose(self) -> None:
        await self.client.aclose()


class CachedProposer:
    """Answers from the run's response cache by prompt digest; asks `inner` (if any) only on a miss."""

    def __init__(self, inner: Proposer | None, lookup: Callable[[str], dict[str, Any] | None],
                 record: Callable[[str, Proposal], None]):
        self.inner, self.lookup, self.record = inner, lookup, record

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        hit = self.lookup(prompt.digest)
        if hit is not None:
            return Proposal(hit["text"], hit.get("model", ""), hit.get("prompt_tokens", 0),
                            hit.get("completion_tokens", 0), hit.get("cost_usd", 0.0), cached=True)
        if self.inner is None:
            raise ReplayMiss(f"replay: the recorded run has no response for prompt {prompt.digest[:12]} ({key})")
        proposal = await self.inner.propose(prompt, key, context)
        self.record(prompt.digest, proposal)
        return proposal

    async def aclose(self) -> None:
        if self.inner is not None:
            await self.inner.aclose()


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
    from kernelsmith.workshop.offline.proposer import MixedProposer, OfflineProposer

    tuner = OfflineProposer(task_source, task_path, config.seed)
    return tuner if kind == "offline" else MixedProposer(LLMProposer(config), tuner)
