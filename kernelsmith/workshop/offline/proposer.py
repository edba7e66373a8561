"""The offline proposer: no model. Round zero translates the reference into a seed program (the offline compiler,
run in a referee sandbox); every later child is a configuration of its parent's launch knobs chosen by the tuner
(`tune.py`: joint sampling, neighbours of the best, successive halving on the referee's intervals).

Answers are ordinary responses (a fenced program), so the engine, the run's record, resume and replay treat them
exactly like a model's. Each answer is a function of the run's seed, the child's place, its parent and the
programs evaluated in earlier rounds (`ProposalContext.history`), so a resumed run answers as the uninterrupted
one did. In "mixed" mode the workshop alternates: model for structure, tuner for tuning.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import random
from typing import Any

from kernelsmith.workshop.prompt import Prompt
from kernelsmith.workshop.proposal import Proposal, ProposalContext, Proposer, charge

OFFLINE = "offline"
SEED_TIMEOUT_S = 300.0  # tracing and shape propagation; refusals come within seconds
# The compiler's sandboxed child: its package's when present (issue 17 moves it), else the workshop's.
SEED_CHILDREN = ("kernelsmith.compiler.child", "kernelsmith.workshop.offline.seed_child")


def _seed_child() -> str:
    for name in SEED_CHILDREN:
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except ModuleNotFoundError:
            continue
    return SEED_CHILDREN[-1]


@dataclasses.dataclass
class Seeds:
    """What the sandboxed compiler sent back: the seed (None and `why` when there is none) and the other seeds
    worth measuring (`alternates`: lenient convolutions left to cuDNN or written in Triton, whichever is not
    first), each as (source, patterns, vendored families)."""

    source: str | None
    patterns: list[str]
    why: str = ""
    sandbox_failed: bool = False  # the sandbox itself failed (time, memory): no answer about the task
    vendor: list[str] = dataclasses.field(default_factory=list)
    alternates: list[tuple[str, list[str], list[str]]] = dataclasses.field(default_factory=list)


def sandboxed_seed(task_source: str, task_path: str, timeout_s: float = SEED_TIMEOUT_S, *,
                   policy: str = "strict", precision: str | None = None) -> Seeds:
    """The offline compiler run in a referee sandbox on the CPU, since tracing the reference runs the task's
    code. The run's `policy` and `precision` go with the job (the compiler keeps torch calls under "lenient",
    and picks the dot precision). Only text comes back, checked for its shape."""
    from kernelsmith.referee.sandbox import run_job

    job = {"source": task_source, "filename": task_path or "<task>", "policy": policy, "precision": precision}
    data, outcome, log = run_job(_seed_child(), job, "cpu", timeout_s, report_limit=4 << 20)
    if data is None:
        why = ("it ran past its time limit" if outcome.timed_out else "it ran out of memory"
               if outcome.memory_exceeded else f"it ended without an answer: {' '.join(log.split())[-200:]}")
        return Seeds(None, [], f"the seed generator's sandbox failed: {why}", sandbox_failed=True)
    source, patterns = data.get("source"), data.get("patterns")
    if data.get("ok") is True and isinstance(source, str) and isinstance(patterns, list):
        alternates = []
        for alt in data.get("alternates") or []:
            if isinstance(alt, dict) and isinstance(alt.get("source"), str) and isinstance(alt.get("patterns"), list):
                alternates.append((alt["source"], _texts(alt["patterns"]), _texts(alt.get("vendor"))))
        return Seeds(source, _texts(patterns), vendor=_texts(data.get("vendor")), alternates=alternates[:4])
    return Seeds(None, [], str(data.get("reason") or "no reason given")[:2000])


def _texts(values: Any) -> list[str]:
    return [str(v)[:80] for v in values[:20]] if isinstance(values, list) else []


def _note_of(patterns: list[str], vendor: list[str]) -> str:
    left = f"; {', '.join(vendor)} left to torch (cuDNN)" if vendor else ""
    return f"Seed from templates: {', '.join(patterns)}{left}."


def _fenced(source: str, note: str) -> str:
    return f"{note}\n```python\n{source.rstrip()}\n```\n"


class OfflineProposer:
    """Seed first, then the tuner. `backend` names whose knobs are tuned (`Backend.knobs`)."""

    def __init__(self, task_source: str, task_path: str, seed: int = 0, *, policy: str = "strict",
                 precision: str | None = None, backend: str = "triton"):
        self.task_source, self.task_path, self.seed = task_source, task_path, seed
        self.policy, self.precision, self.backend = policy, precision, backend
        self._seed_text: str | None = None
        self._seed_source: str | None = None
        self._alternates: list[str] = []  # the other seeds' answers, children 1.. of round 0
        self._parsed: dict[str, Any] = {}  # program text -> tune.Parsed | None (analysis is pure: cached)
        self._history: tuple[int, list[tuple[str, Any, Any]]] | None = None  # (round, evaluated before it)

    def _seed_program(self) -> str:
        """The first Triton version of the reference (computed once); a clear note when no template fits."""
        if self._seed_text is None:
            got = sandboxed_seed(self.task_source, self.task_path, policy=self.policy, precision=self.precision)
            note = _note_of(got.patterns, got.vendor)
            if got.source is None and self.policy == "lenient" and not got.sandbox_failed:
                from kernelsmith.workshop.offline.parts import parts_seed

                whole = got.why
                got = parts_seed(self.task_source, self.task_path, precision=self.precision)
                note = (f"Seed from the model's module calls, each seeded on its own ({', '.join(got.patterns)}); "
                        f"the whole forward is not: {whole.splitlines()[0][:300]}.")
                if got.source is None:
                    got.why = f"{whole}; and {got.why}"
            self._seed_source = got.source
            self._seed_text = (_fenced(got.source, note) if got.source else
                               f"The offline seed generator cannot translate this reference: {got.why}")
            self._alternates = [_fenced(src, "Another seed" + _note_of(pats, vendor)[len("Seed"):])
                                for src, pats, vendor in got.alternates]
        return self._seed_text

    def finder(self) -> Any:
        from kernelsmith.backends import get_backend

        return get_backend(self.backend).knobs

    def _parse(self, code: str) -> Any:
        from kernelsmith.workshop.offline import tune

        if code not in self._parsed:
            self._parsed[code] = tune.parse(code, self.finder())
        return self._parsed[code]

    def _evaluated(self, context: ProposalContext) -> list[tuple[str, Any, Any]]:
        """(name, parsed, program) of every program evaluated before this round, in the run's order."""
        from kernelsmith.workshop.archive import run_order

        if context.history is None:
            return []
        if self._history is None or self._history[0] != context.round:
            programs = [p for p in context.history() if p.round < context.round]
            programs.sort(key=lambda p: run_order(p.round, p.id))
            rows = []
            for p in programs:
                parsed = self._parse(p.code)
                if parsed is not None:
                    rows.append((p.id, parsed, p))
            self._history = (context.round, rows)
        return self._history[1]

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        if context is None or context.parent_code is None:
            seed = self._seed_program()
            if context is None or context.index == 0 or self._seed_source is None:
                return Proposal(seed, OFFLINE)
            # Siblings of the seed in the first round: the other seeds (each then tuned as its own family), then
            # configurations of the seed, sampled jointly, rather than the seed again (a duplicate that would
            # cost a round).
            if context.index <= len(self._alternates):
                return Proposal(self._alternates[context.index - 1], OFFLINE)
            index = context.index - 1 - len(self._alternates)
            return Proposal(self.tune(self._seed_source, dataclasses.replace(context, index=index)), OFFLINE)
        return Proposal(self.tune(context.parent_code, context), OFFLINE)

    def tune(self, parent_code: str, context: ProposalContext) -> str:
        """The answer for child `context.index` of this round: a configuration of the parent's knobs."""
        from kernelsmith.workshop.offline import tune

        parent = self._parse(parent_code)
        if parent is None:
            return "Nothing to tune: the parent has no launch knob (block sizes, num_warps, num_stages, GROUP)."
        evaluated = self._evaluated(context)
        family = [row for row in evaluated if row[1].skeleton == parent.skeleton and row[1].names == parent.names]
        space = tune.space_of(parent, (row[1].config for row in family))
        evidence = tune.gather(space, family)
        rng = random.Random(f"{self.seed}:tune:{context.round}:{space.skeleton}")
        steps = tune.plan(space, evidence, rng, context.index + 1, start=parent.config)
        if len(steps) <= context.index:
            return (f"Nothing left to tune: {len(evidence)} of {space.size()} configurations measured, none of "
                    "them still open.")
        step = steps[context.index]
        try:
            source = tune.with_config(parent_code, space, step.config, self.finder(), step.measurement)
        except ValueError as exc:
            return f"Nothing to tune: {exc}."
        return _fenced(source, _note(space, parent.config, step, tune.standing(evidence), evidence))

    async def aclose(self) -> None:
        return None


def _note(space: Any, parent: tuple[int, ...], step: Any, st: Any, evidence: dict[Any, Any]) -> str:
    """What the tuner did and why, for the run's record (the answer's prose)."""
    changes = [f"{label} {a} → {b}" for label, a, b in zip(space.labels, parent, step.config) if a != b]
    what = {"remeasure": f"measurement {step.measurement} of a configuration still tied with the best",
            "neighbour": "a neighbour of the best configuration" if st.best is not None else
            "a neighbour of the parent's configuration",
            "sample": "a joint sample of the configuration space"}[step.why]
    head = "Tuned: " + ("; ".join(changes) if changes else "the parent's configuration") + f" ({what})"
    if st.best is not None:
        lo, point, hi = evidence[st.best].interval
        head += (f". Best so far {point:.3f}× [{lo:.3f}, {hi:.3f}] over {evidence[st.best].n} measurement(s) "
                 f"({space.describe(st.best)}); {len(st.alive)} alive, {len(st.dropped)} dropped slower beyond the "
                 f"noise, {len(st.failed)} failed, of {len(evidence)} measured")
    return head + "."


class MixedProposer:
    """Even-numbered children from the model (structure), odd ones from the tuner (configuration)."""

    def __init__(self, model: Proposer, tuner: OfflineProposer):
        self.model, self.tuner = model, tuner

    async def propose(self, prompt: Prompt, key: str, context: ProposalContext | None = None) -> Proposal:
        use_tuner = context is not None and context.parent_code is not None and context.index % 2 == 1
        if use_tuner and context is not None:  # the tuner's own numbering: its children are 0, 1, 2, ...
            return await self.tuner.propose(prompt, key, dataclasses.replace(context, index=context.index // 2))
        return await self.model.propose(prompt, key, context)

    def charge(self, tokens: int, cost_usd: float) -> None:
        charge(self.model, tokens, cost_usd)

    async def aclose(self) -> None:
        await self.model.aclose()

