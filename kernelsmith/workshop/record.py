"""One typed record of a run, read back: what the coach, the bench report and the CLI read of a run dir.

`RunReader(run_dir)` opens `run.db` read-only (it never creates, migrates or locks anything, and works on a
read-only mount) and returns typed records: programs with their features, parents and verdicts; prompts as the
chat messages sent, with the names of the programs each one showed; each child's answer with what became of it;
the counters; `summary.json`; and the archive rebuilt exactly as a resumed run rebuilds it. Nothing outside the
store reads the database by SQL or scrapes prompt text. Runs recorded before a field existed read it as None
(prompts' messages: rebuilt from their text when they hash to the recorded digest).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.workshop.archive import Archive, Program, archive_settings, run_order
from kernelsmith.workshop.store import RunStore, StoreError

RUN_ID = "main"  # one run per run dir (`workshop.run`)


class RunReadError(StoreError):
    """A run dir that cannot be read (no run.db, no run in it, a database that does not open)."""


@dataclass(frozen=True)
class ProgramRecord:
    name: str  # "r3c1", "seed"
    code: str
    digest: str  # normalised-source digest; "unusable:<name>" for an answer no program could be parsed from
    parent: str | None
    island: int
    round: int
    features: dict[str, Any]
    verdict: dict[str, Any] | None  # `Verdict.to_dict()` form; None while it was never judged
    status: str  # the verdict's, or "not evaluated"
    score: float | None
    speedup: float | None

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    @property
    def unusable(self) -> bool:
        return self.digest.startswith("unusable:")

    def to_program(self) -> Program:
        return Program.from_verdict(self.name, self.code, self.verdict or {}, parent_id=self.parent,
                                    island=self.island, round=self.round, features=self.features or None,
                                    digest=self.digest)


@dataclass(frozen=True)
class PromptRecord:
    child: str | None  # the program it asked for (None in runs recorded before prompts named their child)
    round: int
    island: int
    parent: str | None
    hash: str  # sha256 of the messages (`Prompt.digest`)
    text: str
    messages: list[dict[str, str]]
    verified: bool  # the messages hash to `hash` (False only where the store redacted a key-shaped string)
    shown: dict[str, Any] | None = None  # {"parent", "top", "diverse", "failures"}: program names


@dataclass(frozen=True)
class AnswerRecord:
    child: str
    prompt_hash: str
    model: str
    text: str
    usage: dict[str, Any] = field(default_factory=dict)
    spent: bool = True  # this run paid for it (False: copied from a recorded run by a replay)
    outcome: str | None = None  # "program", "duplicate", "unusable"; None while undecided (a stop came first)


def messages_digest(messages: list[dict[str, str]]) -> str:
    """`workshop.prompt.Prompt.digest` of a message list."""
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()


_SEP = "\n\n[user]\n"


def split_prompt(text: str, digest: str | None = None) -> tuple[list[dict[str, str]], bool]:
    """The [system, user] messages of a stored `Prompt.text` (runs recorded before messages were stored); True
    when they hash to `digest`."""
    if not text.startswith("[system]\n") or _SEP not in text:
        return [{"role": "user", "content": text}], False
    body = text[len("[system]\n"):]
    first: list[dict[str, str]] | None = None
    start = 0
    while (at := body.find(_SEP, start)) >= 0:  # the system text could contain the separator: try each
        msgs = [{"role": "system", "content": body[:at]}, {"role": "user", "content": body[at + len(_SEP):]}]
        if digest is not None and messages_digest(msgs) == digest:
            return msgs, True
        first = first or msgs
        start = at + 1
    assert first is not None
    return first, False


class RunReader:
    """A run dir's record, read-only. `run_id`: which run of the database (default: the run dir's one)."""

    def __init__(self, run_dir: str | Path, run_id: str | None = None):
        self.run_dir = Path(run_dir)
        db = self.run_dir / "run.db" if self.run_dir.is_dir() else self.run_dir
        if not db.is_file():
            raise RunReadError(f"{run_dir}: not a run dir (no run.db)")
        try:
            self.store = RunStore(db, readonly=True)
            runs = self.store.runs()
        except Exception as exc:  # noqa: BLE001 - any driver error: the file is not a readable run database
            raise RunReadError(f"{db}: cannot read the run database ({type(exc).__name__}: {exc})") from None
        if not runs:
            self.store.close()
            raise RunReadError(f"{db}: holds no run")
        ids = [r["id"] for r in runs]
        self.run_id = run_id if run_id is not None else (RUN_ID if RUN_ID in ids else ids[0])
        if self.run_id not in ids:
            self.store.close()
            raise RunReadError(f"{db}: no run {self.run_id!r} (runs: {', '.join(ids)})")
        run = next(r for r in runs if r["id"] == self.run_id)
        self.config: dict[str, Any] = run["config"] or {}
        self.status: str = run["status"]
        self.created: float = float(run["created"])

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @staticmethod
    def runs_in(run_dir: str | Path) -> list[str]:
        """The ids of the runs a database holds (a run dir holds one; a shared database any number)."""
        reader = RunReader(run_dir)
        try:
            return [r["id"] for r in reader.store.runs()]
        finally:
            reader.close()

    # -- the record ---------------------------------------------------------------------------------------------
    def programs(self) -> list[ProgramRecord]:
        """Every program, in the order it was recorded."""
        rows = self.store.programs(self.run_id)
        names = {r["id"]: r["name"] or f"#{r['id']}" for r in rows}
        return [ProgramRecord(
            name=names[r["id"]], code=r["code"], digest=r["digest"],
            parent=names.get(r["parent_id"]) if r["parent_id"] else None, island=r["island"], round=r["round"],
            features=r["features"] or {}, verdict=r["verdict"], status=r["status"] or "not evaluated",
            score=r["score"], speedup=r["speedup"]) for r in rows]

    def prompts(self) -> list[PromptRecord]:
        rows = self.store.prompts(self.run_id)
        names = {r["id"]: r["name"] for r in self.store.programs(self.run_id)}
        out = []
        for r in rows:
            messages = r.get("messages")
            if messages:
                verified = messages_digest(messages) == r["hash"]
            else:
                messages, verified = split_prompt(r["text"], r["hash"])
            out.append(PromptRecord(child=r.get("child"), round=r["round"], island=r["island"],
                                    parent=names.get(r["parent_id"]) if r["parent_id"] else None, hash=r["hash"],
                                    text=r["text"], messages=messages, verified=verified, shown=r.get("shown")))
        return out

    def answers(self) -> list[AnswerRecord]:
        return [AnswerRecord(child=a["child"], prompt_hash=a["prompt_hash"], model=a["model"], text=a["text"],
                             usage=a["usage"] or {}, spent=a["spent"], outcome=a["outcome"])
                for a in self.store.answers(self.run_id)]

    def legacy_response(self, prompt_hash: str) -> dict[str, Any] | None:
        """A response cached by prompt digest (runs recorded before answers were kept per child)."""
        return self.store.cached_response(prompt_hash)

    def counters(self) -> dict[str, Any]:
        return self.store.counters(self.run_id)

    def rounds_done(self) -> int:
        return int(self.store.counter(self.run_id, "rounds_done") or self.summary().get("rounds_done") or 0)

    def summary(self) -> dict[str, Any]:
        """`summary.json` (written when a run ends), or {}."""
        path = self.run_dir / "summary.json"
        if not path.is_file():
            return {}
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def archive(self) -> Archive:
        """The archive as a resumed run rebuilds it: the judged programs of the finished rounds, in the engine's
        order, with the run's settings (raises ValueError on settings no archive accepts)."""
        done = self.rounds_done()
        kept = sorted((p for p in self.programs() if p.verdict is not None and p.round < done),
                      key=lambda p: run_order(p.round, p.name))
        return Archive.rebuild((p.to_program() for p in kept), rounds_done=done, **archive_settings(self.config))
