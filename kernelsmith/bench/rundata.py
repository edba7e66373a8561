"""A run dir read back for the report, through the run's one reader (`workshop.record.RunReader`, read-only):
programs, verdicts, prompts, answers and counters, plus `summary.json`, and the archive rebuilt from the stored
programs exactly the way a resumed run rebuilds it (same order, same settings) to show its MAP-Elites grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.bench.tasks import BenchInputError
from kernelsmith.workshop.record import RunReader, RunReadError


@dataclass
class RunData:
    run_dir: Path
    config: dict[str, Any]
    status: str
    programs: list[dict[str, Any]]  # insertion order: name, code, parent (name), island, round, verdict, ...
    prompts: list[dict[str, Any]]  # round, island, parent (name), hash
    responses: list[dict[str, Any]]  # the model's answers: round, model, usage, spent
    counters: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def by_name(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.programs}

    @property
    def rounds_done(self) -> int:
        return int(self.counters.get("rounds_done") or self.summary.get("rounds_done") or 0)


def _round_of(child: str) -> int | None:
    head = child[1:].split("c", 1)[0] if child.startswith("r") else ""
    return int(head) if head.isdigit() else None


def load_run(run_dir: Path) -> RunData:
    try:
        reader = RunReader(run_dir)
    except RunReadError as exc:
        raise BenchInputError(str(exc)) from None
    try:
        programs = [{"name": p.name, "code": p.code, "digest": p.digest, "parent": p.parent, "island": p.island,
                     "round": p.round, "features": p.features, "verdict": p.verdict, "score": p.score,
                     "status": p.status, "speedup": p.speedup} for p in reader.programs()]
        prompts = [{"round": p.round, "island": p.island, "parent": p.parent, "hash": p.hash}
                   for p in reader.prompts()]
        responses = [{"round": _round_of(a.child), "model": a.model, "usage": a.usage, "spent": a.spent}
                     for a in reader.answers()]
        if not responses:  # a run recorded before answers were kept per child: its prompt-keyed responses
            for p in prompts:
                hit = reader.legacy_response(p["hash"])
                if hit is not None:
                    responses.append({"round": p["round"], "model": hit["model"], "usage": hit.get("usage") or {},
                                      "spent": True})
        counters = reader.counters()
        summary = reader.summary()
    except Exception as exc:  # noqa: BLE001 - a damaged database: one clear error for the report
        raise BenchInputError(f"{run_dir}: cannot read the run database ({type(exc).__name__}: {exc})") from None
    finally:
        reader.close()
    return RunData(Path(run_dir), reader.config, reader.status, programs, prompts, responses, counters, summary)


def rebuild_archive(run: RunData) -> tuple[Any, str]:
    """(archive, "") rebuilt from the stored programs of the finished rounds, or (None, why not)."""
    try:
        with RunReader(run.run_dir) as reader:
            return reader.archive(), ""
    except Exception as exc:  # noqa: BLE001 - the report still shows everything else
        return None, f"{type(exc).__name__}: {exc}"
