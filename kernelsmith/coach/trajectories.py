"""Reading evolution runs back as steps: for every child program, the prompt the model saw, the answer that
produced it, its parent, both verdicts, and what the prompt showed (the inspirations).

Everything comes from the run's one reader (`workshop.record.RunReader`): since store schema 2 a child's prompt
(as the chat messages sent, with the names of the programs it showed) and its answer are recorded under the
child's name, so a step is linked exactly, whatever templates the run used. The link is still checked: the
answer, parsed against the parent the way the engine parses it, must yield the program's digest; a step that
does not reproduce is reported (`RunSteps.unlinked`), never guessed.

Runs recorded before that (schema 1) are linked as they were then: among the prompts with the program's round,
island and parent, the one whose cached response (by prompt digest, looked up in the run's own database first,
then in every other run dir given in the same call: an old `--replay` run recorded no responses of its own)
reproduces the program; their messages are rebuilt from the prompt text and checked against the digest, and what
a prompt showed is read from its text.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.candidate import Candidate
from kernelsmith.workshop.parse import ParseError, parse_response
from kernelsmith.workshop.record import (
    ProgramRecord,
    PromptRecord,
    RunReader,
    RunReadError,
    messages_digest,
    split_prompt,  # noqa: F401 - part of the coach's interface (tests, notebooks)
)

CORRECT = "correct"
TRANSLATE, OPTIMISE = "translate", "optimise"  # PyTorch -> Triton (first step), Triton -> Triton (later step)
_SHOWN = re.compile(
    r"^### \d+\. (?P<status>[a-z_]+), (?P<speed>[^,\n]+), score (?P<score>-?[0-9.]+)\n```python\n(?P<code>.*?)\n```$",
    re.DOTALL | re.MULTILINE,
)
_REFERENCE = re.compile(r"## Reference \(PyTorch\)\n```python\n(.*?)\n```\n", re.DOTALL)
_SPEED = re.compile(r"(-?[0-9.]+)×")


class CoachError(ValueError):
    """A run dir or data file the coach cannot use; the message names it and says why."""


@dataclass(frozen=True)
class Shown:
    """A program the prompt showed the model besides its parent (an inspiration), as the prompt printed it."""

    digest: str
    status: str
    speedup: float | None  # as printed (3 decimals); None for "speed not measured"
    score: float


@dataclass
class Step:
    """One evolution step: prompt -> response -> child, with the child's parent and both verdicts."""

    run_dir: str
    run_id: str
    task_name: str
    level: str
    task_path: str | None
    name: str  # the child's engine name, "r3c1"
    round: int
    island: int
    prompt_hash: str
    messages: list[dict[str, str]]
    prompt_verified: bool
    response: str
    model: str
    child_id: int
    child_code: str
    child_digest: str  # normalised-source digest (`Candidate.digest`); "unusable:..." for an unparseable response
    child_status: str | None
    child_speedup: float | None
    child_score: float | None
    parent_name: str | None
    parent_code: str | None
    parent_status: str | None
    parent_speedup: float | None
    kind: str  # TRANSLATE or OPTIMISE
    lineage: str  # name of the lineage root: the translation step's child (or the seed program)
    shown: list[Shown] = field(default_factory=list)
    device: str = ""

    @property
    def correct(self) -> bool:
        return self.child_status == CORRECT

    @property
    def gain(self) -> float | None:
        """Speedup over the parent (a translation's parent is the PyTorch reference, speedup 1); None unmeasured."""
        if self.child_speedup is None:
            return None
        if self.kind == TRANSLATE:
            return self.child_speedup
        if self.parent_speedup is None or self.parent_speedup <= 0:
            return None
        return self.child_speedup / self.parent_speedup


@dataclass
class PromptRow:
    """A prompt of a run (every prompt, whether or not it produced a stored program): the RL data's unit."""

    run_dir: str
    task_name: str
    level: str
    round: int
    island: int
    prompt_hash: str
    messages: list[dict[str, str]]
    parent_name: str | None
    parent_code: str | None
    parent_status: str | None
    parent_speedup: float | None


@dataclass
class RunSteps:
    run_dir: str
    task_name: str
    level: str
    config: dict[str, Any]
    reference: str  # the task's original source (the file, else the prompt's reference section)
    steps: list[Step]
    prompts: list[PromptRow]
    unlinked: Counter  # reason -> programs whose step could not be recovered
    total_children: int  # programs produced by prompts (the seed program excluded)


prompt_digest = messages_digest  # `workshop.prompt.Prompt.digest` of a message list


def shown_programs(user_text: str) -> list[Shown]:
    """The programs a prompt shows under "Best programs so far" and "Different approaches"."""
    out = []
    for m in _SHOWN.finditer(user_text):
        sp = _SPEED.fullmatch(m["speed"].strip())
        out.append(Shown(Candidate(m["code"]).digest, m["status"], float(sp[1]) if sp else None, float(m["score"])))
    return out


def task_level(task_path: str | None) -> str:
    """"level1".."level3" from a shipped task's path (`tasks/level2/...`), else "other"."""
    if task_path:
        for part in reversed(Path(task_path).parts[:-1]):
            if re.fullmatch(r"level\d+", part):
                return part
    return "other"


def _is_pytorch(code: str | None) -> bool:
    """A parent without a kernel of its own (no Triton kernel, no CUDA extension) is a PyTorch program: its child's
    step is a translation."""
    return code is None or not any(mark in code for mark in ("triton.jit", "load_inline", "__global__"))


def _find_task_file(task: str | None, run_dir: Path) -> Path | None:
    if not task:
        return None
    p = Path(task)
    for cand in ([p] if p.is_absolute() else [p, run_dir / p, run_dir.parent / p, run_dir.parent.parent / p]):
        if cand.is_file():
            return cand
    return None


class ResponsePool:
    """Responses by prompt digest across several run records (own first): runs recorded before schema 2."""

    def __init__(self, readers: dict[str, list[RunReader]]):
        self.readers = readers

    def get(self, digest: str, own: str) -> dict[str, Any] | None:
        order = [own] + [k for k in self.readers if k != own]
        for key in order:
            for reader in self.readers[key][:1]:  # one database per run dir
                hit = reader.legacy_response(digest)
                if hit is not None:
                    return hit
        return None


def open_runs(run_dirs: list[str | Path]) -> dict[str, list[RunReader]]:
    """Every run of every run dir, read-only."""
    readers: dict[str, list[RunReader]] = {}
    try:
        for d in run_dirs:
            try:
                ids = RunReader.runs_in(d)
                readers[str(d)] = [RunReader(d, run_id) for run_id in ids]
            except RunReadError as exc:
                raise CoachError(str(exc)) from None
    except BaseException:
        for rs in readers.values():
            for r in rs:
                r.close()
        raise
    return readers


def load_steps(run_dirs: list[str | Path]) -> list[RunSteps]:
    """Every run in the given run dirs, as steps (see the module docstring for how they are linked)."""
    readers = open_runs(run_dirs)
    pool = ResponsePool(readers)
    out = []
    try:
        for key, rs in readers.items():
            for reader in rs:
                out.append(_run_steps(Path(key), key, reader, pool))
    finally:
        for rs in readers.values():
            for r in rs:
                r.close()
    return out


def _shown_of(pr: PromptRecord, by_name: dict[str, ProgramRecord]) -> list[Shown]:
    """What a prompt showed besides the parent: by name where the run recorded it, else read from its text."""
    if pr.shown is None:
        return shown_programs(pr.messages[-1]["content"])
    out = []
    for name in [*pr.shown.get("top", []), *pr.shown.get("diverse", [])]:
        q = by_name.get(name)
        if q is not None:
            out.append(Shown(q.digest, q.status, q.speedup, q.score if q.score is not None else 0.0))
    return out


def _run_steps(run_dir: Path, key: str, reader: RunReader, pool: ResponsePool) -> RunSteps:
    config = reader.config
    run_id = reader.run_id
    task_path = config.get("task")
    mode = config.get("response_mode", "full")
    device = config.get("device", "")
    programs = reader.programs()
    by_name = {p.name: p for p in programs}
    prompts = reader.prompts()
    task_file = _find_task_file(task_path, run_dir)
    reference = task_file.read_text() if task_file else ""
    task_name = Path(task_path).stem if task_path else run_id
    level = task_level(task_path)
    if not reference and prompts:
        m = _REFERENCE.search(prompts[0].messages[-1]["content"])
        reference = (m[1] + "\n") if m else ""

    def root_of(p: ProgramRecord) -> str:
        seen = 0
        while seen < 10000:
            parent = by_name.get(p.parent) if p.parent else None
            if parent is None or _is_pytorch(parent.code):
                return p.name
            p, seen = parent, seen + 1
        return p.name

    candidates: dict[tuple[int, int, str | None], list[PromptRecord]] = {}
    for pr in prompts:
        candidates.setdefault((pr.round, pr.island, pr.parent), []).append(pr)
    by_child = {pr.child: pr for pr in prompts if pr.child}
    answers = {a.child: a for a in reader.answers()}

    steps: list[Step] = []
    unlinked: Counter = Counter()
    total = 0
    for index, prog in enumerate(programs):
        if prog.round < 0:  # the seed program (--seed-program): no prompt produced it
            continue
        total += 1
        parent = by_name.get(prog.parent) if prog.parent else None
        base = Candidate(parent.code) if parent else Candidate("")
        found: tuple[PromptRecord, str, str] | None = None
        reason = "no prompt with this round, island and parent"
        # The run's own record first (schema 2): the child's prompt and its answer, both under its name.
        own = [by_child[prog.name]] if prog.name in by_child and prog.name in answers else []
        seen_hashes: set[str] = set()
        for pr in own or candidates.get((prog.round, prog.island, prog.parent), []):
            if pr.hash in seen_hashes:
                continue
            seen_hashes.add(pr.hash)
            if own:
                text, model = answers[prog.name].text, answers[prog.name].model
            else:
                hit = pool.get(pr.hash, key)
                if hit is None:
                    reason = "response not in any given run's response cache"
                    continue
                text, model = hit["text"], hit.get("model") or ""
            if prog.unusable:
                ok = text[:4000] == prog.code
            else:
                try:
                    ok = parse_response(text, base, mode).candidate.digest == prog.digest
                except ParseError:
                    ok = False
            if ok:
                found = (pr, text, model)
                break
            reason = "no recorded answer reproduces the program"
        if found is None:
            unlinked[reason] += 1
            continue
        pr, text, model = found
        kind = TRANSLATE if _is_pytorch(parent.code if parent else None) else OPTIMISE
        steps.append(Step(
            run_dir=key, run_id=run_id, task_name=task_name, level=level, task_path=task_path,
            name=prog.name, round=prog.round, island=prog.island, prompt_hash=pr.hash,
            messages=pr.messages, prompt_verified=pr.verified, response=text, model=model,
            child_id=index, child_code=prog.code, child_digest=prog.digest, child_status=prog.status,
            child_speedup=prog.speedup, child_score=prog.score,
            parent_name=parent.name if parent else None, parent_code=parent.code if parent else None,
            parent_status=parent.status if parent else None, parent_speedup=parent.speedup if parent else None,
            kind=kind, lineage=root_of(prog), shown=_shown_of(pr, by_name), device=device,
        ))

    rows = []
    seen: set[str] = set()
    for pr in prompts:
        if pr.hash in seen:  # a resumed run sends a redone round's prompts again
            continue
        seen.add(pr.hash)
        parent = by_name.get(pr.parent) if pr.parent else None
        rows.append(PromptRow(
            run_dir=key, task_name=task_name, level=level, round=pr.round, island=pr.island,
            prompt_hash=pr.hash, messages=pr.messages, parent_name=parent.name if parent else None,
            parent_code=parent.code if parent else None, parent_status=parent.status if parent else None,
            parent_speedup=parent.speedup if parent else None,
        ))
    return RunSteps(run_dir=key, task_name=task_name, level=level, config=config, reference=reference, steps=steps,
                    prompts=rows, unlinked=unlinked, total_children=total)
