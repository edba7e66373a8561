"""What every proposer speaks: `Proposal`, `ProposalContext`, the `Proposer` protocol and `charge`.

A module of its own, importing nothing of the workshop, so that `proposers.py` (the model, the run's record, the
factory) and `offline/proposer.py` (the no-model proposer) both build on it without importing each other.
`kernelsmith.workshop.proposers` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from kernelsmith.workshop.archive import Program
    from kernelsmith.workshop.prompt import Prompt


@dataclass(frozen=True)
class ProposalContext:
    """What a proposer that does not read prompts (the offline tuner) needs: the parent and where it stands.

    `history`, when the engine gives it, reads the run's evaluated programs (each with its round, code, status and
    speedup interval) without changing anything; a proposer may use only those of rounds before `round`, which
    are complete and the same in a resumed run, so its answer stays a function of the record."""

    parent_code: str | None
    round: int
    island: int
    index: int
    history: Callable[[], Sequence[Program]] | None = None


@dataclass(frozen=True)
class Proposal:
    text: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False  # taken from a record, not asked now
    spent: bool = True  # this run paid for it (False for a replay's answers)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "model": self.model, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "cost_usd": self.cost_usd}


class Proposer(Protocol):
    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal: ...

    async def aclose(self) -> None: ...


def charge(proposer: Any, tokens: int, cost_usd: float) -> None:
    """Count spending done before this process (a resumed run's) against the proposer's budget, if it has one."""
    fn = getattr(proposer, "charge", None)
    if fn is not None and (tokens or cost_usd):
        fn(tokens, cost_usd)
