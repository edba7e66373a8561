"""The service's job queue on SQLite: accepted evaluations survive a restart and each ends with one verdict.

A job moves `queued` → `running` → `done`. `claim` takes the oldest queued job in one conditional UPDATE, so
two dispatchers never take the same job; `finish` records the verdict only while the job is `running` under
the same claim (its `attempt`), so a verdict is written exactly once even if a restarted service re-ran the job.

A job whose evaluation broke the process running it (the worker died or froze, or the whole service stopped
uncleanly while it ran) gets a *fault* (`fault`, and `recover()` at start-up for what a killed service left
`running`). It goes back to the queue as a suspect — run alone, so a second fault is its own — until it has
`max_faults`; then it ends `crashed` with the reasons. Without that cap a job that kills its evaluator is
re-queued forever and starves the jobs queued beside it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from sqlalchemy import (
    Column,
    Connection,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    func,
    inspect,
    select,
    text,
    update,
)

from kernelsmith.referee.verdict import Status, Verdict
from kernelsmith.sqlite import open_engine

QUEUED, RUNNING, DONE = "queued", "running", "done"
DEFAULT_MAX_FAULTS = 2

metadata = MetaData()
JOBS = Table(
    "jobs", metadata,
    Column("id", String(32), primary_key=True),
    Column("batch", String(32), nullable=False),
    Column("position", Integer, nullable=False),  # order within its batch
    Column("status", String(16), nullable=False),
    Column("request", Text, nullable=False),  # JSON
    Column("verdict", Text),  # JSON, once done
    Column("attempt", Integer, nullable=False, default=0),
    Column("created", Float, nullable=False),
    Column("started", Float),
    Column("finished", Float),
    Column("faults", Integer, nullable=False, default=0),  # times its evaluation broke the process running it
    Column("fault_log", Text),  # JSON list of the reasons
    Column("client", String(160)),  # who submitted it (token name or address), for per-client limits
)
Index("ix_jobs_status_created", JOBS.c.status, JOBS.c.created)
Index("ix_jobs_batch", JOBS.c.batch, JOBS.c.position)
Index("ix_jobs_client_status", JOBS.c.client, JOBS.c.status)

# Columns added after the first release: a database made by an older service gets them on open.
_ADDED = {"faults": "INTEGER NOT NULL DEFAULT 0", "fault_log": "TEXT", "client": "VARCHAR(160)"}


class Claimed(NamedTuple):
    id: str
    batch: str
    attempt: int
    faults: int
    request: dict[str, Any]


def crash_verdict(reasons: list[str], device: str = "") -> dict[str, Any]:
    """The verdict of a job that broke its evaluator `len(reasons)` times: `crashed`, saying why each time."""
    n = len(reasons)
    error = (f"the evaluation broke the process running it {n} time{'s' * (n != 1)} and is not run again: "
             + "; ".join(reasons))
    return Verdict(Status.CRASHED, error=error, device=device).to_dict()


class JobStore:
    def __init__(self, path: str | Path):
        self.url, self.engine = open_engine(path)
        with self.engine.begin() as conn:
            if inspect(conn).has_table("jobs"):
                have = {c["name"] for c in inspect(conn).get_columns("jobs")}
                for name, ddl in _ADDED.items():
                    if name not in have:
                        conn.execute(text(f"ALTER TABLE jobs ADD COLUMN {name} {ddl}"))
        metadata.create_all(self.engine)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()

    def add(self, requests: list[dict[str, Any]], client: str | None = None) -> tuple[str, list[str]]:
        """Queue a batch in one transaction; (batch id, job ids in order)."""
        batch, now = uuid.uuid4().hex, time.time()
        ids = [uuid.uuid4().hex for _ in requests]
        rows = [{"id": i, "batch": batch, "position": n, "status": QUEUED, "request": json.dumps(r),
                 "attempt": 0, "faults": 0, "client": client, "created": now + n * 1e-6}
                for n, (i, r) in enumerate(zip(ids, requests))]
        with self._tx() as conn:
            conn.execute(JOBS.insert(), rows)
        return batch, ids

    @staticmethod
    def _picked(suspects: bool | None) -> Any:
        return JOBS.c.faults >= 0 if suspects is None else JOBS.c.faults > 0 if suspects else JOBS.c.faults == 0

    def claim(self, suspects: bool | None = None) -> Claimed | None:
        """The oldest queued job, now `running`; None when the queue is empty. `suspects`: True, only jobs that
        have faulted before (they run alone); False, only jobs that have not; None, any."""
        picked = self._picked(suspects)
        while True:
            with self._tx() as conn:
                row = conn.execute(select(JOBS.c.id, JOBS.c.batch, JOBS.c.attempt, JOBS.c.faults)
                                   .where(JOBS.c.status == QUEUED, picked)
                                   .order_by(JOBS.c.created).limit(1)).first()
                if row is None:
                    return None
                attempt = row.attempt + 1
                taken = conn.execute(update(JOBS).where(JOBS.c.id == row.id, JOBS.c.status == QUEUED)
                                     .values(status=RUNNING, attempt=attempt, started=time.time())).rowcount
                if taken:
                    request = conn.execute(select(JOBS.c.request).where(JOBS.c.id == row.id)).scalar_one()
                    return Claimed(row.id, row.batch, attempt, row.faults, json.loads(request))

    def has_queued(self, suspects: bool | None = None) -> bool:
        picked = self._picked(suspects)
        with self._tx() as conn:
            return conn.execute(select(JOBS.c.id).where(JOBS.c.status == QUEUED, picked).limit(1)).first() is not None

    def finish(self, job_id: str, attempt: int, verdict: dict[str, Any]) -> bool:
        """Record the verdict if this claim still owns the job; False if it was already finished or re-claimed."""
        with self._tx() as conn:
            return bool(conn.execute(
                update(JOBS).where(JOBS.c.id == job_id, JOBS.c.status == RUNNING, JOBS.c.attempt == attempt)
                .values(status=DONE, verdict=json.dumps(verdict), finished=time.time())).rowcount)

    def _fault(self, conn: Connection, row: Any, reason: str, max_faults: int, device: str) -> str:
        reasons = [*json.loads(row.fault_log or "[]"), reason]
        values: dict[str, Any] = {"faults": row.faults + 1, "fault_log": json.dumps(reasons)}
        if row.faults + 1 >= max_faults:
            values.update(status=DONE, verdict=json.dumps(crash_verdict(reasons, device)), finished=time.time())
        else:
            values.update(status=QUEUED, started=None)
        conn.execute(update(JOBS).where(JOBS.c.id == row.id, JOBS.c.attempt == row.attempt).values(**values))
        return values["status"]

    def fault(self, job_id: str, attempt: int, reason: str, max_faults: int = DEFAULT_MAX_FAULTS,
              device: str = "") -> str | None:
        """This claim's evaluation broke its process: the job is queued again as a suspect, or ends `crashed`
        once it has `max_faults`. Returns the new status (None if the claim no longer owns the job)."""
        with self._tx() as conn:
            row = conn.execute(select(JOBS.c.id, JOBS.c.attempt, JOBS.c.faults, JOBS.c.fault_log).where(
                JOBS.c.id == job_id, JOBS.c.status == RUNNING, JOBS.c.attempt == attempt)).first()
            return None if row is None else self._fault(conn, row, reason, max_faults, device)

    def requeue(self, job_id: str, attempt: int) -> bool:
        """Put a running job back in the queue without blame (the service is stopping cleanly)."""
        with self._tx() as conn:
            return bool(conn.execute(
                update(JOBS).where(JOBS.c.id == job_id, JOBS.c.status == RUNNING, JOBS.c.attempt == attempt)
                .values(status=QUEUED, started=None)).rowcount)

    def recover(self, max_faults: int = DEFAULT_MAX_FAULTS, device: str = "") -> int:
        """Jobs a killed service left running: each gets a fault (the service did not stop cleanly while it ran)
        and is queued again, or ends `crashed` at `max_faults`. Returns how many were found."""
        with self._tx() as conn:
            rows = conn.execute(select(JOBS.c.id, JOBS.c.attempt, JOBS.c.faults, JOBS.c.fault_log)
                                .where(JOBS.c.status == RUNNING)).all()
            for row in rows:
                self._fault(conn, row, "the service stopped uncleanly while it ran", max_faults, device)
        return len(rows)

    def in_flight(self, client: str | None) -> int:
        """Jobs of `client` not yet done."""
        with self._tx() as conn:
            return conn.execute(select(func.count()).select_from(JOBS).where(
                JOBS.c.client == client, JOBS.c.status.in_((QUEUED, RUNNING)))).scalar_one()

    @staticmethod
    def _public(row: Any) -> dict[str, Any]:
        return {"id": row.id, "batch": row.batch, "status": row.status, "attempts": row.attempt,
                "faults": row.faults, "verdict": json.loads(row.verdict) if row.verdict else None,
                "created": row.created, "started": row.started, "finished": row.finished}

    def get(self, job_id: str) -> dict[str, Any] | None:
        with self._tx() as conn:
            row = conn.execute(select(JOBS).where(JOBS.c.id == job_id)).first()
        return self._public(row) if row else None

    def batch(self, batch_id: str) -> list[dict[str, Any]]:
        with self._tx() as conn:
            rows = conn.execute(select(JOBS).where(JOBS.c.batch == batch_id).order_by(JOBS.c.position)).all()
        return [self._public(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with self._tx() as conn:
            rows = conn.execute(select(JOBS.c.status, func.count()).group_by(JOBS.c.status)).all()
        return {QUEUED: 0, RUNNING: 0, DONE: 0, **{s: n for s, n in rows}}

    def verdict_counts(self) -> dict[str, int]:
        """Finished jobs by verdict status (for /metrics); counted by the database where it can."""
        out: dict[str, int] = {}
        with self._tx() as conn:
            if self.engine.dialect.name == "sqlite":
                status = func.json_extract(JOBS.c.verdict, "$.status")
                for s, n in conn.execute(select(status, func.count()).where(JOBS.c.status == DONE).group_by(status)):
                    out[s or "unknown"] = out.get(s or "unknown", 0) + n
                return out
            for (raw,) in conn.execute(select(JOBS.c.verdict).where(JOBS.c.status == DONE)):
                s = json.loads(raw).get("status", "unknown")
                out[s] = out.get(s, 0) + 1
        return out
