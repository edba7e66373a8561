"""The service's job queue on SQLite: accepted evaluations survive a restart and each ends with one verdict.

A job moves `queued` → `running` → `done`. `claim` takes the oldest queued job in one conditional UPDATE, so
two dispatchers never take the same job; `finish` records the verdict only while the job is `running` under
the same claim (its `attempt`), so a verdict is written exactly once even if a restarted service re-ran the job.
On start-up `recover()` puts jobs left `running` by a killed service back in the queue.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    select,
    update,
)

from kernelsmith.sqlite import open_engine

QUEUED, RUNNING, DONE = "queued", "running", "done"

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
)
Index("ix_jobs_status_created", JOBS.c.status, JOBS.c.created)
Index("ix_jobs_batch", JOBS.c.batch, JOBS.c.position)


class JobStore:
    def __init__(self, path: str | Path):
        self.url, self.engine = open_engine(path)
        metadata.create_all(self.engine)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()

    def add(self, requests: list[dict[str, Any]]) -> tuple[str, list[str]]:
        """Queue a batch in one transaction; (batch id, job ids in order)."""
        batch, now = uuid.uuid4().hex, time.time()
        ids = [uuid.uuid4().hex for _ in requests]
        rows = [{"id": i, "batch": batch, "position": n, "status": QUEUED, "request": json.dumps(r),
                 "attempt": 0, "created": now + n * 1e-6} for n, (i, r) in enumerate(zip(ids, requests))]
        with self._tx() as conn:
            conn.execute(JOBS.insert(), rows)
        return batch, ids

    def claim(self) -> tuple[str, int, dict[str, Any]] | None:
        """The oldest queued job, now `running`: (id, attempt, request); None when the queue is empty."""
        while True:
            with self._tx() as conn:
                row = conn.execute(select(JOBS.c.id, JOBS.c.attempt).where(JOBS.c.status == QUEUED)
                                   .order_by(JOBS.c.created).limit(1)).first()
                if row is None:
                    return None
                attempt = row.attempt + 1
                taken = conn.execute(update(JOBS).where(JOBS.c.id == row.id, JOBS.c.status == QUEUED)
                                     .values(status=RUNNING, attempt=attempt, started=time.time())).rowcount
                if taken:
                    request = conn.execute(select(JOBS.c.request).where(JOBS.c.id == row.id)).scalar_one()
                    return row.id, attempt, json.loads(request)

    def finish(self, job_id: str, attempt: int, verdict: dict[str, Any]) -> bool:
        """Record the verdict if this claim still owns the job; False if it was already finished or re-claimed."""
        with self._tx() as conn:
            return bool(conn.execute(
                update(JOBS).where(JOBS.c.id == job_id, JOBS.c.status == RUNNING, JOBS.c.attempt == attempt)
                .values(status=DONE, verdict=json.dumps(verdict), finished=time.time())).rowcount)

    def recover(self) -> int:
        """Jobs a killed service left running go back to the queue (they are evaluated again from scratch)."""
        with self._tx() as conn:
            return conn.execute(update(JOBS).where(JOBS.c.status == RUNNING)
                                .values(status=QUEUED, started=None)).rowcount

    @staticmethod
    def _public(row: Any) -> dict[str, Any]:
        return {"id": row.id, "batch": row.batch, "status": row.status, "attempts": row.attempt,
                "verdict": json.loads(row.verdict) if row.verdict else None,
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
        """Finished jobs by verdict status (for /metrics)."""
        out: dict[str, int] = {}
        with self._tx() as conn:
            for (text,) in conn.execute(select(JOBS.c.verdict).where(JOBS.c.status == DONE)):
                status = json.loads(text).get("status", "unknown")
                out[status] = out.get(status, 0) + 1
        return out
