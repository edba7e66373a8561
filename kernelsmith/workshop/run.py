"""`kernelsmith evolve`: a run dir with its database, the engine, the live display, and the results.

Layout of a run dir: `run.db` (SQLite, WAL: config, programs, verdicts, prompts, answers, counters),
`config.yaml` (the effective settings), and at the end `best.py`, `summary.json`, `lineage.json`.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import yaml

from kernelsmith.candidate import Candidate
from kernelsmith.referee.verdict import Status, Verdict
from kernelsmith.settings import EvalRequest
from kernelsmith.workshop.archive import RANKING_RULE, Program
from kernelsmith.workshop.config import ConfigError, RunConfig
from kernelsmith.workshop.engine import Engine, Progress
from kernelsmith.workshop.proposers import CachedProposer, Proposal, make_proposer
from kernelsmith.workshop.record import RUN_ID
from kernelsmith.workshop.store import RunStore


class Ledger:
    """The engine's view of the run database: programs by their stable names ("r3c1", "seed")."""

    def __init__(self, store: RunStore):
        self.store = store
        self._ids: dict[str, int] = {}

    def _id(self, run_id: str, name: str) -> int | None:
        if name not in self._ids:
            pid = self.store.program_id_by_name(run_id, name)
            if pid is None:
                return None
            self._ids[name] = pid
        return self._ids[name]

    def counter(self, run_id: str, name: str) -> Any:
        return self.store.counter(run_id, name)

    def set_counters(self, run_id: str, values: dict[str, Any]) -> None:
        self.store.set_counters(run_id, values)

    def created(self, run_id: str) -> float | None:
        run = self.store.run(run_id)
        return float(run["created"]) if run else None

    def last_write(self, run_id: str) -> float | None:
        return self.store.last_write(run_id)

    def set_answer_outcome(self, run_id: str, name: str, outcome: str) -> None:
        self.store.set_answer_outcome(run_id, name, outcome)

    def _program(self, row: dict[str, Any]) -> Program:
        parent = self.store.program(row["parent_id"]) if row.get("parent_id") else None
        verdict = row.get("verdict") or {"status": "compile_error", "error": "not evaluated"}
        return Program.from_verdict(row["name"], row["code"], verdict, parent_id=parent["name"] if parent else None,
                                    island=row["island"], round=row["round"], features=row.get("features"),
                                    digest=row["digest"])

    def archived_programs(self, run_id: str) -> list[Program]:
        return [self._program(r) for r in self.store.programs(run_id) if r.get("verdict") is not None]

    def program(self, run_id: str, name: str) -> Program | None:
        pid = self._id(run_id, name)
        row = self.store.program(pid) if pid is not None else None
        return self._program(row) if row else None

    def program_by_digest(self, run_id: str, digest: str) -> Program | None:
        pid = self.store.program_id_for(run_id, digest)
        row = self.store.program(pid) if pid is not None else None
        return self._program(row) if row else None

    def add_program(self, run_id: str, program: Program, outcome: str | None = None) -> None:
        parent = self._id(run_id, program.parent_id) if program.parent_id else None
        self._ids[program.id] = self.store.add_program(
            run_id, program.code, digest=program.digest, parent_id=parent, island=program.island,
            round=program.round, features=dict(program.features) or None, name=program.id, outcome=outcome)

    def verdict_for(self, run_id: str, name: str) -> dict[str, Any] | None:
        pid = self._id(run_id, name)
        return self.store.verdict_for(pid) if pid is not None else None

    def add_verdict(self, run_id: str, name: str, verdict: Verdict | dict[str, Any]) -> None:
        self.store.add_verdict(self._id(run_id, name), verdict)

    def mark_pending(self, run_id: str, name: str) -> None:
        self.store.mark_pending(self._id(run_id, name))

    def clear_pending(self, run_id: str, name: str) -> None:
        self.store.clear_pending(self._id(run_id, name))

    def add_prompt(self, run_id: str, name: str, round_: int, island: int, parent: str | None, prompt: Any,
                   shown: dict[str, Any]) -> None:
        self.store.add_prompt(run_id, prompt.text, round=round_, island=island,
                              parent_id=self._id(run_id, parent) if parent else None, hash=prompt.digest, child=name,
                              messages=prompt.messages, shown=shown)


def _answers(store: RunStore, inner: Any, recorded: RunStore | None = None) -> CachedProposer:
    """The run's answers (by child) in front of the model; in a replay, the recorded run's answers instead."""

    def record(child: str, prompt_digest: str, p: Proposal) -> None:
        usage = {k: v for k, v in p.to_dict().items() if k not in ("text", "model")}
        store.add_answer(RUN_ID, child, prompt_digest, p.model, p.text, usage, spent=p.spent)

    def replayed(child: str) -> dict[str, Any] | None:
        if recorded is None:
            return None
        hit = recorded.answer(RUN_ID, child)
        if hit is None:  # a run recorded before answers were kept per child (schema 1): by prompt, as then
            prompt = next((p for p in recorded.prompts(RUN_ID) if p.get("child") == child), None)
            old = recorded.cached_response(prompt["hash"]) if prompt else None
            if old is not None:
                hit = {"text": old["text"], "model": old["model"], "usage": old.get("usage"),
                       "prompt_hash": prompt["hash"] if prompt else None}
        return hit

    return CachedProposer(inner, lambda child: store.answer(RUN_ID, child), record,
                          replayed if recorded is not None else None)


class RunLock:
    """One process per run dir: an exclusive `flock` on `run.lock`, held while the run goes on. The kernel drops
    it when its holder exits, however it exits, so the lock a `kill -9` left behind is taken over by the next
    process at once (and atomically: of two that start together, one wins). The file names the holder."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "run.lock"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(self.fd, 4096, 0) or b"{}")
            except ValueError:
                holder = {}
            os.close(self.fd)
            who = ", ".join(f"{k} {holder[k]}" for k in ("pid", "host", "since") if k in holder) or "unknown"
            raise ConfigError(f"{run_dir}: another kernelsmith process is running this run ({who}); "
                              "wait for it to end or stop it first") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                       "since": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                       "argv": sys.argv[:8]}).encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # the flock goes with the last descriptor
            self.fd = -1


def prepare_run_dir(config: RunConfig, resume: bool) -> tuple[Path, RunLock]:
    """The run dir, locked for this process: checked for a run to resume (or none to overwrite) only once the
    lock is held, so two processes cannot both start a new run there."""
    run_dir = config.run_dir
    db = run_dir / "run.db"

    def check() -> None:
        if db.exists() and not resume:
            raise ConfigError(f"{run_dir}: a run is already here; pass --resume to continue it, or choose --run-dir")
        if resume and not db.exists():
            raise ConfigError(f"{run_dir}: no run to resume (no run.db)")

    check()  # before anything is made there
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{run_dir}: cannot create the run dir ({exc.strerror})") from None
    lock = RunLock(run_dir)
    try:
        check()  # again under the lock: another process may have started a run here meanwhile
    except ConfigError:
        lock.release()
        raise
    return run_dir, lock


def default_eval_workers(config: RunConfig) -> int:
    """Evaluations in flight when the config names none: on a GPU as many as the pool runs at once per GPU
    (`pool.auto_slots`), at most the population; on the CPU one (the interpreter keeps a core busy)."""
    if config.device != "cuda" or config.referee_url:
        return 1 if not config.referee_url else min(config.population, 8)
    import torch

    from kernelsmith.referee.pool import auto_slots

    return max(1, min(config.population, auto_slots(max(1, torch.cuda.device_count()))))


def _remote_judge(config: RunConfig, task: Any) -> Any:
    """Evaluate through a referee service (`kernelsmith serve`); checked once now, so a wrong URL or token
    fails before the run starts rather than as a verdict of every candidate."""
    import os

    from kernelsmith.referee.client import RefereeClient, ServiceError

    client = RefereeClient(config.referee_url, os.environ.get(config.referee_token_env) or None,
                           timeout_s=config.eval_timeout_s + 60)
    settings = config.eval_settings()
    try:
        health = client.check()
    except ServiceError as exc:
        raise ConfigError(f"setting 'referee_url': {exc}") from None
    if health.get("backend", {}).get("device") not in (None, config.device):
        raise ConfigError(f"setting 'referee_url': the service evaluates on {health['backend']['device']}, "
                          f"the run asks for {config.device}")

    def judge(candidate: Candidate) -> Verdict:
        request = EvalRequest(task_source=task.source, task_name=task.name, candidate_source=candidate.source,
                              options=settings).to_dict()
        try:
            return Verdict.coerce(client.evaluate_many([request], timeout_s=config.eval_timeout_s * 4 + 600)[0])
        except ServiceError as exc:  # the service is gone for good: a verdict says so, the run goes on
            return Verdict(Status.CRASHED, error=f"referee service: {exc}")

    return judge


def evolve(config: RunConfig, *, resume: bool = False, replay: Path | None = None, seed_program: Path | None = None,
           display: Any = None, changed: dict[str, Any] | None = None,
           judge: Callable[[Candidate], Verdict | dict[str, Any]] | None = None) -> dict[str, Any]:
    """Run (or resume, or replay) an evolution; returns the summary written to `summary.json`. `changed`: the
    settings a resume changed (`config.resume_config`), recorded in the run. `judge`: evaluate with this instead
    of the referee (a custom evaluator; verdict dicts in `Verdict.to_dict()` form)."""
    from kernelsmith.task import Task

    if config.task is None:
        raise ConfigError("setting 'task': no task file given")
    task = Task.load(config.task, config.overrides, device=config.device)
    inner = make_proposer(config, task.source, str(task.path)) if replay is None else None  # fails (no model, no key) before any file exists
    recorded = Path(replay) / "run.db" if replay is not None else None
    if recorded is not None and not recorded.exists():
        raise ConfigError(f"{replay}: no recorded run to replay (no run.db)")
    if config.eval_workers is None:  # recorded as the number it became, so the run says what it did
        config = config.model_copy(update={"eval_workers": default_eval_workers(config)})
    run_dir, lock = prepare_run_dir(config, resume)
    try:
        return _evolve_locked(config, task, inner, recorded, run_dir, seed_program, display, changed or {}, judge)
    finally:
        lock.release()


def _evolve_locked(config: RunConfig, task: Any, inner: Any, recorded: Path | None, run_dir: Path,
                   seed_program: Path | None, display: Any, changed: dict[str, Any],
                   judge: Callable[[Candidate], Verdict | dict[str, Any]] | None) -> dict[str, Any]:
    from kernelsmith.referee.pool import LocalPool
    from kernelsmith.workshop.hardware import probe_hardware

    store = RunStore(run_dir / "run.db")
    if store.run(RUN_ID) is None:
        store.create_run(config.model_dump(mode="json"), run_id=RUN_ID)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    elif changed:  # a resume that goes on longer (or spends more): the run's settings are now these
        history = store.counter(RUN_ID, "settings_changes") or []
        store.set_counter(RUN_ID, "settings_changes", history + [{"at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                                                                   "changed": changed}])
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    # The recorded run is only read: opened read-only, it is neither migrated nor locked.
    proposer = _answers(store, inner, RunStore(recorded, readonly=True) if recorded is not None else None)
    if judge is None and config.referee_url:
        judge = _remote_judge(config, task)
    elif judge is None:  # the one way into evaluation: the pool places work on GPUs and holds each GPU's timing lease
        pool = LocalPool(config.device, slots_per_gpu=config.eval_workers, cpu_slots=config.eval_workers)
        settings = config.eval_settings()

        def judge(candidate: Candidate) -> Verdict:
            return Verdict.coerce(pool.run(EvalRequest(task_source=task.source, task_name=task.name,
                                                       candidate_source=candidate.source, options=settings)))

    hardware = store.counter(RUN_ID, "hardware") or probe_hardware(config.device)
    store.set_counter(RUN_ID, "hardware", hardware)
    recorded_rule = store.counter(RUN_ID, "ranking_rule")
    seed = Candidate.from_file(seed_program) if seed_program else None
    progress = Progress(rounds=config.rounds)
    if recorded_rule is None and store.counter(RUN_ID, "rounds_done") is None:
        store.set_counter(RUN_ID, "ranking_rule", RANKING_RULE)
    elif recorded_rule != RANKING_RULE:  # an older kernelsmith ranked this run: say so, once, and in the run
        why = (f"this run was ranked by another rule ({recorded_rule or 'point scores, before intervals tied'}); "
               "its archive is rebuilt under the current one, so the resumed run is not exactly the old one")
        progress.note(why)
        store.log_event(RUN_ID, "ranking_rule_changed", {"recorded": recorded_rule, "now": RANKING_RULE})
    engine = Engine(config, Ledger(store), RUN_ID, task.name, task.original_source, proposer, judge, hardware,
                    seed, progress)

    async def main() -> None:
        try:
            with display(progress) if display else nullcontext():
                await engine.run()
        finally:
            await proposer.aclose()

    asyncio.run(main())
    summary = engine.write_outputs(run_dir)
    store.set_run_status(RUN_ID, "finished" if not progress.stopped else "stopped")
    return summary
