"""The evolution loop: rounds of propose → evaluate → archive, resumable after a crash and replayable.

Determinism is what makes resume exact: child `i` of round `r` (named "r{r}c{i}") draws its parent and
inspirations from a random stream seeded by `(seed, r, i)`, and a round's results enter the archive in child
order only when the round is complete. A resumed run therefore rebuilds the same archive, sends the same
prompts, gets each child's own recorded answer back (answers are keyed by the child's name, never by the
prompt, which siblings often share), finds the same programs' verdicts in the store, and evaluates only what
was in flight when it stopped. The progress counters, the spending and the elapsed time are checkpointed with
each finished round (in the transaction that finishes it) and the round in progress is counted again as it is
redone, so a resumed run ends with the numbers the uninterrupted one would have. Within a round, proposals and
evaluations overlap: each child is its own task, bounded by the model's and the evaluators' concurrency limits.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.candidate import Candidate
from kernelsmith.referee.verdict import Status, Verdict
from kernelsmith.workshop.archive import Archive, Program, archive_settings, run_order
from kernelsmith.workshop.config import RunConfig
from kernelsmith.workshop.features import kernel_features
from kernelsmith.workshop.parse import ParseError, parse_response
from kernelsmith.workshop.prompt import build_prompt, load_templates
from kernelsmith.workshop.proposers import Proposal, ProposalContext, Proposer, charge

# candidate -> its verdict (or the verdict's dict form, as the pool and the service answer); run in a worker thread.
# Inside the engine a verdict is a `Verdict`; it becomes a dict only where the store writes it.
Evaluator = Callable[[Candidate], "Verdict | dict[str, Any]"]
SEED_ID = "seed"


@dataclass
class Progress:
    """What the live display shows; updated by the engine, read by the CLI."""

    round: int = 0
    rounds: int = 0
    proposed: int = 0
    evaluated: int = 0
    correct: int = 0
    duplicates: int = 0
    unusable: int = 0
    in_flight_proposals: int = 0
    in_flight_evaluations: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    best_speedup: float | None = None
    best_id: str | None = None
    stopped: str = ""
    events: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.events = (self.events + [text])[-8:]

    COUNTED = ("proposed", "evaluated", "correct", "duplicates", "unusable", "tokens", "cost_usd")

    def counts(self) -> dict[str, Any]:
        """The counters a run keeps across a resume."""
        d = asdict(self)
        return {k: d[k] for k in self.COUNTED}

    def load_counts(self, counts: dict[str, Any]) -> None:
        for k in self.COUNTED:
            if k in counts:
                setattr(self, k, type(getattr(self, k))(counts[k]))


class TaskFailed(RuntimeError):
    """The task itself failed (its reference or its inputs: `fault == "task"`) while no program was correct yet:
    nothing can be judged, so the run stops. The verdict is not recorded, so a resume evaluates that program again
    (a transient failure, such as memory another process held, does not end the run for good)."""

    def __init__(self, verdict: Verdict):
        super().__init__(f"the task failed, not the candidate: {verdict.error[:300]}")
        self.verdict = verdict


@dataclass(frozen=True)
class ChildResult:
    program: Program
    new: bool  # False for a duplicate of a stored program (not added to the archive twice)


class Engine:
    def __init__(self, config: RunConfig, store: Any, run_id: int, task_name: str, reference: str,
                 proposer: Proposer, evaluate: Evaluator, hardware: dict[str, Any] | None = None,
                 seed_program: Candidate | None = None, progress: Progress | None = None):
        self.config, self.store, self.run_id = config, store, run_id
        self.task_name, self.reference = task_name, reference
        self.proposer, self.evaluate_sync = proposer, evaluate
        self.hardware = hardware or {}
        self.seed_program = seed_program
        self.progress = progress or Progress(rounds=config.rounds)
        self.templates = load_templates(config.templates_dir)
        self.eval_slots = asyncio.Semaphore(config.eval_workers or 1)  # run.evolve resolves None first
        self.archive = self._new_archive()
        self._elapsed_before = 0.0  # time spent on this run by earlier processes (resume)
        self.task_failure: dict[str, Any] | None = None  # the verdict that stopped the run (TaskFailed)
        self._started = time.monotonic()

    def _new_archive(self) -> Archive:
        return Archive(**archive_settings(self.config.model_dump()))

    # -- resume -------------------------------------------------------------------------------------------------
    def restore(self) -> int:
        """Rebuild the archive, the counters and the spending from the store; return the first round to run."""
        done = self.store.counter(self.run_id, "rounds_done") or 0
        snapshot = self.store.counter(self.run_id, "progress")
        if snapshot:  # the counters as the last finished round (or the seed) left them
            self.progress.load_counts(snapshot)
            charge(self.proposer, int(snapshot.get("tokens", 0)), float(snapshot.get("cost_usd", 0.0)))
        # Time: what earlier processes checkpointed, plus what the last one did after its checkpoint until its
        # last write (a killed process loses no more than the time since its last write).
        since = float(snapshot["at"]) if snapshot else self.store.created(self.run_id)
        last = self.store.last_write(self.run_id)
        self._elapsed_before = float(snapshot.get("elapsed_s", 0.0)) if snapshot else 0.0
        if since is not None and last is not None and last > since:
            self._elapsed_before += last - since
        seeded = bool(snapshot and snapshot.get("seeded"))
        kept = [p for p in self.store.archived_programs(self.run_id)
                if p.round < done and (p.id != SEED_ID or seeded)]  # an unsnapshotted seed is counted again
        kept.sort(key=lambda p: run_order(p.round, p.id))  # what the uninterrupted run added, in its order
        self.archive = Archive.rebuild(kept, rounds_done=done, **archive_settings(self.config.model_dump()))
        self._refresh_best()
        return done

    # -- one child ----------------------------------------------------------------------------------------------
    async def _evaluate(self, pid: str, candidate: Candidate) -> Verdict:
        stored = self.store.verdict_for(self.run_id, pid)
        if stored is not None:  # judged by an earlier process in a round being redone: counted in this round
            self.progress.evaluated += 1
            return Verdict.coerce(stored)
        self.store.mark_pending(self.run_id, pid)
        self.progress.in_flight_evaluations += 1
        try:
            async with self.eval_slots:
                verdict = Verdict.coerce(await asyncio.to_thread(self.evaluate_sync, candidate))
        finally:
            self.progress.in_flight_evaluations -= 1
        if verdict.task_fault and not self._any_correct():
            raise TaskFailed(verdict)  # left pending: a resume evaluates it again
        self.store.add_verdict(self.run_id, pid, verdict)
        self.store.clear_pending(self.run_id, pid)
        self.progress.evaluated += 1
        return verdict

    async def _child(self, round_: int, index: int) -> ChildResult:
        try:
            return await self._make_child(round_, index)
        finally:
            if not self._parsed[index].is_set():  # failed before parsing: siblings must not wait for it
                self._announce(index, None)

    async def _make_child(self, round_: int, index: int) -> ChildResult:
        c = self.config
        island = index % c.islands
        rng = random.Random(f"{c.seed}:{round_}:{index}")
        parent = self.archive.sample_parent(island, rng)
        inspirations = self.archive.inspirations(island, c.inspirations, rng, parent) if parent else []
        n_top = (c.inspirations + 1) // 2
        parent_verdict = self.store.verdict_for(self.run_id, parent.id) if parent else None
        failures = self.archive.failures(island, c.failures_in_prompt)
        prompt = build_prompt(
            task_name=self.task_name, reference=self.reference,
            parent_code=parent.code if parent else "(none yet: write the first Triton version of the reference)",
            parent_verdict=parent_verdict, top=inspirations[:n_top], diverse=inspirations[n_top:],
            failures=failures, hardware=self.hardware,
            round_=round_, island=island, response_mode=c.response_mode, policy=c.policy, templates=self.templates,
            backend=c.backend)
        pid = f"r{round_}c{index}"
        shown = {"parent": parent.id if parent else None, "top": [p.id for p in inspirations[:n_top]],
                 "diverse": [p.id for p in inspirations[n_top:]], "failures": [p.id for p in failures]}
        self.store.add_prompt(self.run_id, pid, round_, island, parent.id if parent else None, prompt, shown)
        self.progress.in_flight_proposals += 1
        try:
            context = ProposalContext(parent.code if parent else None, round_, island, index)
            proposal: Proposal = await self.proposer.propose(prompt, pid, context)
        finally:
            self.progress.in_flight_proposals -= 1
        self.progress.proposed += 1
        if proposal.spent:
            self.progress.tokens += proposal.tokens
            self.progress.cost_usd += proposal.cost_usd
        base = Candidate(parent.code) if parent else Candidate("")
        try:
            child = parse_response(proposal.text, base, c.response_mode).candidate
        except ParseError as exc:
            self._announce(index, None)
            self.progress.unusable += 1
            verdict = Verdict(Status.COMPILE_ERROR, error=f"unusable response: {exc}")
            program = Program.from_verdict(pid, proposal.text[:4000], verdict, parent_id=parent.id if parent else None,
                                           island=island, round=round_, digest=f"unusable:{pid}")
            self._record(program, verdict, outcome="unusable")
            return ChildResult(program, new=True)
        # Duplicates, decided deterministically: an earlier round's program, or a lower-numbered sibling's.
        self._announce(index, child.digest)
        for j in range(index):
            await self._parsed[j].wait()
        twin = self.store.program_by_digest(self.run_id, child.digest)
        earlier = twin is not None and twin.round < round_
        if earlier or child.digest in self._digests[:index]:
            self.progress.duplicates += 1
            self.store.set_answer_outcome(self.run_id, pid, "duplicate")
            return ChildResult(twin or Program(pid, child.source, digest=child.digest), new=False)
        if twin is None:
            self.store.add_program(self.run_id, Program(pid, child.source, parent.id if parent else None, island,
                                                         round_, features=kernel_features(child.source),
                                                         digest=child.digest), outcome="program")
        verdict = await self._evaluate(pid, child)
        program = Program.from_verdict(pid, child.source, verdict, parent_id=parent.id if parent else None,
                                       island=island, round=round_, digest=child.digest)
        return ChildResult(program, new=True)

    def _announce(self, index: int, digest: str | None) -> None:
        self._digests[index] = digest
        self._parsed[index].set()

    def _record(self, program: Program, verdict: Verdict, outcome: str) -> None:
        if self.store.program(self.run_id, program.id) is None:
            self.store.add_program(self.run_id, program, outcome=outcome)
        if self.store.verdict_for(self.run_id, program.id) is None:
            self.store.add_verdict(self.run_id, program.id, verdict)

    # -- the run ------------------------------------------------------------------------------------------------
    async def _seed(self) -> None:
        if SEED_ID in self.archive:
            return
        stored = self.store.program(self.run_id, SEED_ID)  # a resume need not be given the seed program again
        cand = self.seed_program if stored is None else Candidate(stored.code)
        if cand is None:
            return
        if self.store.program_by_digest(self.run_id, cand.digest) is None:
            self.store.add_program(self.run_id, Program(SEED_ID, cand.source, None, 0, -1,
                                                        features=kernel_features(cand.source), digest=cand.digest))
        verdict = await self._evaluate(SEED_ID, cand)
        program = Program.from_verdict(SEED_ID, cand.source, verdict, island=0, round=-1, digest=cand.digest)
        self.archive.add(program)
        self.progress.correct += program.correct
        self._refresh_best()
        self.store.set_counters(self.run_id, {"progress": self._checkpoint(seeded=True)})

    def _any_correct(self) -> bool:
        best = self.archive.best()
        return best is not None and best.correct

    def elapsed_s(self) -> float:
        """Time spent on this run, over every process that worked on it."""
        return self._elapsed_before + (time.monotonic() - self._started)

    def _checkpoint(self, seeded: bool) -> dict[str, Any]:
        return {**self.progress.counts(), "elapsed_s": round(self.elapsed_s(), 3), "at": time.time(),
                "seeded": seeded}

    async def run(self) -> Progress:
        from kernelsmith.workshop.llm import BudgetExhausted, LLMError
        from kernelsmith.workshop.proposers import RunDiverged

        self._started = time.monotonic()
        start = self.restore()
        try:
            await self._seed()
        except TaskFailed as exc:
            self._stop(exc)
            return self.progress
        c = self.config
        for round_ in range(start, c.rounds):
            self.progress.round = round_ + 1
            self._parsed = [asyncio.Event() for _ in range(c.population)]
            self._digests: list[str | None] = [None] * c.population
            tasks = [asyncio.create_task(self._child(round_, i)) for i in range(c.population)]
            results: list[ChildResult | BaseException] = await asyncio.gather(*tasks, return_exceptions=True)
            stop = next((r for r in results if isinstance(r, TaskFailed)), None) or next(
                (r for r in results if isinstance(r, (BudgetExhausted, RunDiverged))), None)
            if stop is not None:  # a partial round is not archived: a resume redoes it exactly
                self._stop(stop)
                break
            for r in results:
                if isinstance(r, LLMError):
                    self.progress.unusable += 1
                    self.progress.note(f"model error: {r}")
                elif isinstance(r, BaseException):
                    raise r
                elif r.new:
                    self.archive.add(r.program)
                    self.progress.correct += r.program.correct
            self.archive.maybe_migrate(round_)
            self.store.set_counters(self.run_id, {  # one transaction: a round is finished with its counters
                "rounds_done": round_ + 1, "progress": self._checkpoint(seeded=SEED_ID in self.archive)})
            self._refresh_best()
            best = self.progress.best_speedup
            self.progress.note(f"round {round_ + 1}: best " + (f"{best:.3f}×" if best else str(self.progress.best_id)))
        return self.progress

    def _stop(self, why: BaseException) -> None:
        self.progress.stopped = f"{type(why).__name__}: {why}"
        if isinstance(why, TaskFailed):
            self.task_failure = why.verdict.to_dict()

    def _refresh_best(self) -> None:
        best = self.archive.best()
        if best is not None:
            self.progress.best_speedup, self.progress.best_id = best.speedup, best.id

    # -- what the user gets -------------------------------------------------------------------------------------
    def lineage(self) -> list[dict[str, Any]]:
        """The best program and its ancestors, root first, each with its speedup and what changed."""
        chain: list[Program] = []
        p = self.archive.best()
        while p is not None and len(chain) < 1000:
            chain.append(p)
            p = self.store.program(self.run_id, p.parent_id) if p.parent_id else None
        chain.reverse()
        out = []
        for prev, cur in zip([None, *chain[:-1]], chain):
            diff = list(difflib.unified_diff((prev.code if prev else "").splitlines(), cur.code.splitlines(),
                                             lineterm="", n=1))
            added = sum(1 for d in diff if d.startswith("+") and not d.startswith("+++"))
            removed = sum(1 for d in diff if d.startswith("-") and not d.startswith("---"))
            out.append({"id": cur.id, "round": cur.round, "status": cur.status, "speedup": cur.speedup,
                        "speedup_ci": cur.speedup_ci, "lines_added": added, "lines_removed": removed,
                        "diff": "\n".join(diff[:400])})
        return out

    def write_outputs(self, run_dir: Path) -> dict[str, Any]:
        best = self.archive.best()
        if best is not None:
            (run_dir / "best.py").write_text(best.code)
        pr = self.progress
        summary = {
            "task": self.task_name, "rounds_done": self.store.counter(self.run_id, "rounds_done") or 0,
            "rounds": self.config.rounds, "best_id": best.id if best else None,
            "best_status": best.status if best else None, "best_speedup": best.speedup if best else None,
            "best_speedup_ci": list(best.speedup_ci) if best and best.speedup_ci else None,
            "programs": len(self.archive), "evaluated": pr.evaluated, "correct_in_archive": sum(
                1 for p in self.archive.hall_of_fame() if p.correct),
            "duplicates": pr.duplicates, "unusable_responses": pr.unusable, "tokens": pr.tokens,
            "cost_usd": round(pr.cost_usd, 6), "stopped": pr.stopped, "elapsed_s": round(self.elapsed_s(), 1),
            "archive_digest": self.archive.snapshot_digest(), "finished_at": time.time(),
            "task_failure": self.task_failure,
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        (run_dir / "lineage.json").write_text(json.dumps(self.lineage(), indent=2))
        return summary
