"""Reading evolution runs back as steps: for every child program, the prompt the model saw, the response that
produced it, its parent, both verdicts, and what the prompt showed (the inspirations).

A run dir's `run.db` does not link a prompt to the program it produced directly: a prompt row has
(round, island, parent), a program row has (name "r{round}c{child}", round, island, parent), and the response
cache is keyed by the prompt's digest. `load_steps` links them exactly: among the prompts with the program's
round, island and parent it takes the one whose cached response, parsed against the parent the way the engine
parses it (`workshop.parse.parse_response`), yields the program's digest. A step whose response cannot be found
or does not reproduce the program is reported (`RunSteps.unlinked`), never guessed.

Prompt rows hold `Prompt.text` (`"[system]\\n...\\n\\n[user]\\n..."`), not the messages; `split_prompt` rebuilds
the messages and checks them against the stored digest (the sha256 of the messages), so a sample's prompt is
byte-for-byte the one the model saw (`prompt_verified`; False only where the store redacted a key-shaped
string, which changes the text).

Runs recorded since answers are kept per child (store schema 2) link a program to its prompt and answer by the
child's name directly, and a `--replay` run holds copies of the answers it replayed. For older runs, responses
are looked up in the run's own database first, then in every other run dir given in the same call (an old
`--replay` run recorded no responses of its own), so pass both dirs.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.candidate import Candidate
from kernelsmith.workshop.parse import ParseError, parse_response
from kernelsmith.workshop.store import RunStore

CORRECT = "correct"
TRANSLATE, OPTIMISE = "translate", "optimise"  # PyTorch -> Triton (first step), Triton -> Triton (later step)
_SEP = "\n\n[user]\n"
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


def prompt_digest(messages: list[dict[str, str]]) -> str:
    """`workshop.prompt.Prompt.digest` of a message list (the response cache's key)."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


def split_prompt(text: str, digest: str | None = None) -> tuple[list[dict[str, str]], bool]:
    """Rebuild the [system, user] messages from a stored `Prompt.text`; True when they hash to `digest`."""
    if not text.startswith("[system]\n") or _SEP not in text:
        return [{"role": "user", "content": text}], False
    body = text[len("[system]\n"):]
    first: list[dict[str, str]] | None = None
    start = 0
    while (at := body.find(_SEP, start)) >= 0:  # the system text could contain the separator: try each
        msgs = [{"role": "system", "content": body[:at]}, {"role": "user", "content": body[at + len(_SEP):]}]
        if digest is not None and prompt_digest(msgs) == digest:
            return msgs, True
        first = first or msgs
        start = at + 1
    assert first is not None
    return first, False


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
    """A parent without a Triton kernel is a PyTorch program: its child's step is a translation."""
    return code is None or "triton.jit" not in code


def _find_task_file(task: str | None, run_dir: Path) -> Path | None:
    if not task:
        return None
    p = Path(task)
    for cand in ([p] if p.is_absolute() else [p, run_dir / p, run_dir.parent / p, run_dir.parent.parent / p]):
        if cand.is_file():
            return cand
    return None


class ResponsePool:
    """Response texts by prompt digest across several run databases (own database first)."""

    def __init__(self, stores: dict[str, RunStore]):
        self.stores = stores

    def get(self, digest: str, own: str) -> dict[str, Any] | None:
        order = [own] + [k for k in self.stores if k != own]
        for key in order:
            hit = self.stores[key].cached_response(digest)
            if hit is not None:
                return hit
        return None


def open_runs(run_dirs: list[str | Path]) -> dict[str, RunStore]:
    stores: dict[str, RunStore] = {}
    for d in run_dirs:
        d = Path(d)
        db = d / "run.db" if d.is_dir() else d
        if not db.is_file():
            raise CoachError(f"{d}: not a run dir (no run.db)")
        stores[str(d)] = RunStore(db)
    return stores


def load_steps(run_dirs: list[str | Path]) -> list[RunSteps]:
    """Every run in the given run dirs, as steps (see the module docstring for how they are linked)."""
    stores = open_runs(run_dirs)
    pool = ResponsePool(stores)
    out = []
    try:
        for key, store in stores.items():
            for run in store.runs():
                out.append(_run_steps(Path(key), key, store, run, pool))
    finally:
        for s in stores.values():
            s.close()
    return out


def _run_steps(run_dir: Path, key: str, store: RunStore, run: dict[str, Any], pool: ResponsePool) -> RunSteps:
    config = run["config"] or {}
    run_id = run["id"]
    task_path = config.get("task")
    mode = config.get("response_mode", "full")
    device = config.get("device", "")
    programs = store.programs(run_id)
    by_id = {p["id"]: p for p in programs}
    prompts = store.prompts(run_id)
    task_file = _find_task_file(task_path, run_dir)
    reference = task_file.read_text() if task_file else ""
    task_name = Path(task_path).stem if task_path else run_id
    level = task_level(task_path)

    decoded: dict[int, tuple[list[dict[str, str]], bool]] = {}
    for pr in prompts:
        decoded[pr["id"]] = split_prompt(pr["text"], pr["hash"])
    if not reference and prompts:
        m = _REFERENCE.search(decoded[prompts[0]["id"]][0][-1]["content"])
        reference = (m[1] + "\n") if m else ""

    def speed(p: dict[str, Any] | None) -> float | None:
        return p.get("speedup") if p else None

    def root_of(p: dict[str, Any]) -> str:
        seen = 0
        while seen < 10000:
            parent = by_id.get(p["parent_id"]) if p.get("parent_id") else None
            if parent is None or _is_pytorch(parent["code"]):
                return p["name"] or str(p["id"])
            p, seen = parent, seen + 1
        return p["name"] or str(p["id"])

    candidates: dict[tuple[int, int, int | None], list[dict[str, Any]]] = {}
    for pr in prompts:
        candidates.setdefault((pr["round"], pr["island"], pr["parent_id"]), []).append(pr)
    by_child = {pr["child"]: pr for pr in prompts if pr.get("child")}
    answers = {a["child"]: a for a in store.answers(run_id)}

    steps: list[Step] = []
    unlinked: Counter = Counter()
    total = 0
    for prog in programs:
        if prog["round"] < 0:  # the seed program (--seed-program): no prompt produced it
            continue
        total += 1
        parent = by_id.get(prog["parent_id"]) if prog["parent_id"] else None
        base = Candidate(parent["code"]) if parent else Candidate("")
        unusable = str(prog["digest"]).startswith("unusable:")
        found: tuple[dict[str, Any], dict[str, Any]] | None = None
        reason = "no prompt with this round, island and parent"
        seen_hashes: set[str] = set()
        # The run's own record first (schema 2): the child's prompt and its answer, both keyed by its name;
        # runs recorded before answers were kept per child are linked by their prompts' cached responses.
        own = [by_child[prog["name"]]] if prog["name"] in by_child and prog["name"] in answers else []
        for pr in own or candidates.get((prog["round"], prog["island"], prog["parent_id"]), []):
            if pr["hash"] in seen_hashes:
                continue
            seen_hashes.add(pr["hash"])
            hit = answers[prog["name"]] if own else pool.get(pr["hash"], key)
            if hit is None:
                reason = "response not in any given run's response cache"
                continue
            if unusable:
                ok = hit["text"][:4000] == prog["code"]
            else:
                try:
                    ok = parse_response(hit["text"], base, mode).candidate.digest == prog["digest"]
                except ParseError:
                    ok = False
            if ok:
                found = (pr, hit)
                break
            reason = "no cached response reproduces the program"
        if found is None:
            unlinked[reason] += 1
            continue
        pr, hit = found
        messages, verified = decoded[pr["id"]]
        kind = TRANSLATE if _is_pytorch(parent["code"] if parent else None) else OPTIMISE
        steps.append(Step(
            run_dir=key, run_id=run_id, task_name=task_name, level=level, task_path=task_path,
            name=prog["name"] or str(prog["id"]), round=prog["round"], island=prog["island"], prompt_hash=pr["hash"],
            messages=messages, prompt_verified=verified, response=hit["text"], model=hit.get("model") or "",
            child_id=prog["id"], child_code=prog["code"], child_digest=prog["digest"], child_status=prog["status"],
            child_speedup=speed(prog), child_score=prog["score"],
            parent_name=(parent["name"] or str(parent["id"])) if parent else None,
            parent_code=parent["code"] if parent else None, parent_status=parent["status"] if parent else None,
            parent_speedup=speed(parent), kind=kind, lineage=root_of(prog),
            shown=shown_programs(messages[-1]["content"]), device=device,
        ))

    rows = []
    seen: set[str] = set()
    for pr in prompts:
        if pr["hash"] in seen:  # a resumed run sends a redone round's prompts again
            continue
        seen.add(pr["hash"])
        parent = by_id.get(pr["parent_id"]) if pr["parent_id"] else None
        rows.append(PromptRow(
            run_dir=key, task_name=task_name, level=level, round=pr["round"], island=pr["island"],
            prompt_hash=pr["hash"], messages=decoded[pr["id"]][0],
            parent_name=(parent["name"] or str(parent["id"])) if parent else None,
            parent_code=parent["code"] if parent else None, parent_status=parent["status"] if parent else None,
            parent_speedup=speed(parent),
        ))
    return RunSteps(run_dir=key, task_name=task_name, level=level, config=config, reference=reference, steps=steps,
                    prompts=rows, unlinked=unlinked, total_children=total)
