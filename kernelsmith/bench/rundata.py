"""A run dir read back for the report: programs, verdicts, prompts, responses and counters from `run.db`
(read-only sqlite3 queries, never the workshop's writer), plus `summary.json`, and the archive rebuilt from the
stored programs exactly the way a resumed run rebuilds it (same order, same settings) to show its MAP-Elites grid.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.bench.tasks import BenchInputError


def _json(v: Any) -> Any:
    if isinstance(v, (bytes, str)):
        try:
            return json.loads(v)
        except (json.JSONDecodeError, TypeError):
            return v
    return v


@dataclass
class RunData:
    run_dir: Path
    config: dict[str, Any]
    status: str
    programs: list[dict[str, Any]]  # insertion order: name, code, parent (name), island, round, verdict, ...
    prompts: list[dict[str, Any]]
    responses: list[dict[str, Any]]
    counters: dict[str, Any]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def by_name(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.programs}

    @property
    def rounds_done(self) -> int:
        return int(self.counters.get("rounds_done") or self.summary.get("rounds_done") or 0)


def _connect(db: Path) -> sqlite3.Connection:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        conn.execute("select 1 from programs limit 1")
    except sqlite3.Error:  # a read-only folder with a WAL database: read the file as it is
        conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
    conn.row_factory = sqlite3.Row
    return conn


def load_run(run_dir: Path) -> RunData:
    db = run_dir / "run.db"
    if not db.is_file():
        raise BenchInputError(f"{run_dir}: not a run dir (no run.db)")
    try:
        conn = _connect(db)
        run = conn.execute("select id, config, status from runs order by created limit 1").fetchone()
        if run is None:
            raise BenchInputError(f"{db}: holds no run")
        rid = run["id"]
        rows = conn.execute(
            "select p.id, p.name, p.code, p.digest, p.parent_id, p.island, p.round, p.features, v.verdict, "
            "v.score, v.status, v.speedup from programs p left join verdicts v on v.program_id = p.id "
            "where p.run_id = ? order by p.id", (rid,)).fetchall()
        prompts = [dict(r) for r in conn.execute(
            "select round, island, parent_id, hash from prompts where run_id = ? order by id", (rid,))]
        responses = [dict(r, usage=_json(r["usage"]) or {}) for r in conn.execute(
            "select prompt_hash, model, usage from responses order by id")]
        counters = {r["name"]: _json(r["value"]) for r in conn.execute(
            "select name, value from counters where run_id = ?", (rid,))}
        conn.close()
    except sqlite3.Error as exc:
        raise BenchInputError(f"{db}: cannot read the run database ({exc})") from None
    names = {r["id"]: r["name"] or f"#{r['id']}" for r in rows}
    programs = []
    for r in rows:
        programs.append({
            "name": names[r["id"]], "code": r["code"], "digest": r["digest"],
            "parent": names.get(r["parent_id"]) if r["parent_id"] else None, "island": r["island"],
            "round": r["round"], "features": _json(r["features"]), "verdict": _json(r["verdict"]),
            "score": r["score"], "status": r["status"] or "not evaluated", "speedup": r["speedup"]})
    for p in prompts:
        p["parent"] = names.get(p.pop("parent_id"))
    summary: dict[str, Any] = {}
    if (run_dir / "summary.json").is_file():
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except json.JSONDecodeError:
            summary = {}
    return RunData(run_dir, _json(run["config"]) or {}, run["status"], programs, prompts, responses, counters,
                   summary)


def _order(p: dict[str, Any]) -> tuple[int, int]:
    name = str(p["name"])
    if p["round"] < 0:
        return (-1, 0)
    tail = name.rsplit("c", 1)[-1]
    return (p["round"], int(tail) if tail.isdigit() else 0)


def rebuild_archive(run: RunData) -> tuple[Any, str]:
    """(archive, "") rebuilt from the stored programs of the finished rounds, or (None, why not)."""
    from kernelsmith.workshop.archive import Archive, Program

    c = run.config
    try:
        archive = Archive(islands=int(c.get("islands", 4)), hall_of_fame=int(c.get("hall_of_fame", 16)),
                          failures_kept=max(16, int(c.get("failures_in_prompt", 3))), seed=int(c.get("seed", 0)),
                          migration_interval=int(c.get("migration_interval", 5)))
        done = run.rounds_done
        kept = sorted((p for p in run.programs if p["verdict"] is not None and p["round"] < done), key=_order)
        for p in kept:
            archive.add(Program.from_verdict(p["name"], p["code"], p["verdict"], parent_id=p["parent"],
                                             island=p["island"], round=p["round"], features=p["features"] or None,
                                             digest=p["digest"]))
        archive.maybe_migrate(done - 1)
        return archive, ""
    except Exception as exc:  # noqa: BLE001 - the report still shows everything else
        return None, f"{type(exc).__name__}: {exc}"
