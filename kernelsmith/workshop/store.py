"""The run database: runs, programs, verdicts, prompts, a response cache, in-flight work, counters and events.

SQLAlchemy 2 Core on SQLite (WAL journal, `synchronous=NORMAL`, foreign keys on, a busy timeout); the schema uses
only portable types (Integer, Float, String, Text, `sqlalchemy.JSON`; timestamps are Unix-time floats), so the
same tables work on PostgreSQL: pass a URL (`postgresql+psycopg://...`) instead of a path.

Durability: every write method is one committed transaction. With WAL and `synchronous=NORMAL` a committed
transaction survives the process being killed (`kill -9`); only an OS crash or power loss may lose the last
few. A killed run therefore loses at most the write in progress, and the `pending` table says which
evaluations were in flight: `mark_pending` before handing a program to the referee, `add_verdict` clears the
row in the same transaction that records the verdict, and on resume `pending(run_id)` is the work to redo.

Secrets: nothing in the store may hold an API key. `create_run` refuses a config with a key-looking value (a
secret-named field — key, token, secret, password, credential, auth — holding a string that is not an
environment-variable name, or any string shaped like a known key format such as `sk-...`), and prompt,
response and event text is scrubbed of key-shaped strings before it is written.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    delete,
    func,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError

from kernelsmith.referee.verdict import Verdict
from kernelsmith.sqlite import open_engine

SCHEMA_VERSION = 2  # 2: `answers` (the model's answer per child), replacing the prompt-keyed `responses`

metadata = MetaData()

RUNS = Table(
    "runs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("config", JSON, nullable=False),
    Column("created", Float, nullable=False),
    Column("updated", Float, nullable=False),
    Column("status", String(32), nullable=False),
)

PROGRAMS = Table(
    "programs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("code", Text, nullable=False),
    Column("digest", String(64), nullable=False),
    Column("name", String(64), nullable=True),  # the engine's stable name ("r3c1"): same on resume and replay
    Column("parent_id", Integer, ForeignKey("programs.id"), nullable=True),
    Column("island", Integer, nullable=False),
    Column("round", Integer, nullable=False),
    Column("features", JSON, nullable=True),
    Column("created", Float, nullable=False),
    UniqueConstraint("run_id", "digest", name="uq_programs_run_digest"),
    UniqueConstraint("run_id", "name", name="uq_programs_run_name"),
    Index("ix_programs_run", "run_id", "id"),
)

VERDICTS = Table(
    "verdicts",
    metadata,
    Column("program_id", Integer, ForeignKey("programs.id", ondelete="CASCADE"), primary_key=True),
    Column("verdict", JSON, nullable=False),
    Column("score", Float, nullable=False),
    Column("status", String(32), nullable=False),
    Column("speedup", Float, nullable=True),
    Column("created", Float, nullable=False),
)

PROMPTS = Table(
    "prompts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("round", Integer, nullable=False),
    Column("island", Integer, nullable=False),
    Column("parent_id", Integer, ForeignKey("programs.id"), nullable=True),
    Column("text", Text, nullable=False),
    Column("hash", String(64), nullable=False),
    Column("created", Float, nullable=False),
    Column("child", String(64), nullable=True),  # the name of the program this prompt asked for (r{round}c{i})
    Column("messages", JSON, nullable=True),  # the chat messages sent (their sha256 is `hash`)
    Column("shown", JSON, nullable=True),  # names of the programs it showed: parent, top, diverse, failures
    Index("ix_prompts_run", "run_id", "id"),
    Index("ix_prompts_hash", "hash"),
)

RESPONSES = Table(
    "responses",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("prompt_hash", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("sample", Integer, nullable=False),
    Column("text", Text, nullable=False),
    Column("usage", JSON, nullable=True),
    Column("created", Float, nullable=False),
    UniqueConstraint("prompt_hash", "model", "sample", name="uq_responses_key"),
)

ANSWERS = Table(  # what each child was answered: the key everywhere is the child's name, never the prompt
    "answers",
    metadata,
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("child", String(64), primary_key=True),
    Column("prompt_hash", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("text", Text, nullable=False),
    Column("usage", JSON, nullable=True),  # prompt_tokens, completion_tokens, cost_usd
    Column("spent", Integer, nullable=False),  # 1: this run paid for it; 0: copied from a recorded run (replay)
    Column("outcome", String(16), nullable=True),  # "program", "duplicate", "unusable"; set with the program
    Column("created", Float, nullable=False),
)

PENDING = Table(
    "pending",
    metadata,
    Column("program_id", Integer, ForeignKey("programs.id", ondelete="CASCADE"), primary_key=True),
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("created", Float, nullable=False),
    Index("ix_pending_run", "run_id", "program_id"),
)

COUNTERS = Table(
    "counters",
    metadata,
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(100), primary_key=True),
    Column("value", JSON, nullable=True),
    Column("updated", Float, nullable=False),
)

EVENTS = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(64), nullable=False),
    Column("data", JSON, nullable=True),
    Column("created", Float, nullable=False),
    Index("ix_events_run", "run_id", "id"),
)

META = Table(
    "meta",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(200), nullable=False),
)


class StoreError(ValueError):
    """A write the store refuses (a duplicate program, a key-looking config, an unknown id)."""


class DuplicateProgram(StoreError):
    """A program whose digest is already in the run."""


class SecretInConfig(StoreError):
    """A run config holding something that looks like an API key."""


# ---- secrets ------------------------------------------------------------------------------------------------------
_SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "passphrase", "credential", "credentials", "auth",
    "authorization", "bearer", "cookie",
})
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:sk-[A-Za-z0-9_\-]{8,}|sk_(?:live|test)_[A-Za-z0-9]{8,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|xox[abprs]-[A-Za-z0-9\-]{10,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{30,}"
    r"|hf_[A-Za-z0-9]{20,}|Bearer\s+[A-Za-z0-9._\-]{16,})"
)
_ENV_NAME = re.compile(r"^\$?\{?[A-Z][A-Z0-9_]*\}?$")  # "OPENAI_API_KEY", "$OPENAI_API_KEY": a reference, fine


def _words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w}


def _secret_named(name: str) -> bool:
    words = _words(name)
    if words & {"env", "var", "envvar", "file", "path", "header", "name"}:  # names a place the secret is, not it
        return False
    return bool(words & _SECRET_WORDS) or "apikey" in name.lower().replace("_", "").replace("-", "")


def looks_like_key(value: str) -> bool:
    """A string shaped like a known API-key format (`sk-...`, `ghp_...`, `AKIA...`, `Bearer ...`)."""
    return bool(_KEY_SHAPES.search(value)) or value.strip().startswith("sk-")


def find_secrets(obj: Any, path: str = "config") -> list[str]:
    """Paths (never values) of key-looking entries in a JSON-like value."""
    found: list[str] = []
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            sub = f"{path}.{k}"
            if isinstance(v, str) and v.strip() and _secret_named(str(k)):
                s = v.strip()
                if not _ENV_NAME.match(s) and not re.fullmatch(r"[0-9.]+", s):
                    found.append(sub)
                    continue
            found.extend(find_secrets(v, sub))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            found.extend(find_secrets(v, f"{path}[{i}]"))
    elif isinstance(obj, str) and looks_like_key(obj):
        found.append(path)
    return found


def redact(value: str) -> str:
    return _KEY_SHAPES.sub("[redacted]", value)


def _redact_json(obj: Any) -> Any:
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, Mapping):
        return {k: _redact_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_redact_json(v) for v in obj]
    return obj


def _jsonable(obj: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(obj))
    except (TypeError, ValueError) as exc:
        raise StoreError(f"{what} is not JSON-serialisable: {exc}") from None


def text_hash(text_: str) -> str:
    return hashlib.sha256(text_.encode()).hexdigest()


def _answer_row(row: Mapping[str, Any]) -> dict[str, Any]:
    d = {k: row[k] for k in ("child", "prompt_hash", "model", "text", "usage", "outcome", "created")}
    d["spent"] = bool(row["spent"])
    return d


# ---- the store ----------------------------------------------------------------------------------------------------
def _add_missing_columns(conn: Connection) -> None:
    """Databases written before a nullable column existed get it (SQLite: ALTER TABLE ... ADD COLUMN)."""
    if conn.dialect.name != "sqlite":
        return
    for table in (PROMPTS,):
        have = {row[1] for row in conn.execute(text(f"PRAGMA table_info({table.name})"))}
        for col in table.columns:
            if col.name not in have and col.nullable:
                conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {col.name} {col.type.compile(conn.dialect)}"))


class RunStore:
    """One database file (or URL) holding any number of runs. Thread-safe through SQLAlchemy's pool."""

    def __init__(self, path: str | Path, *, echo: bool = False, readonly: bool = False):
        """`readonly`: for readers (`workshop.record.RunReader`): nothing is created or migrated, and every write
        fails; a database written before a column existed reads that column as None."""
        self.url, self.engine = open_engine(path, echo=echo, readonly=readonly)
        self.readonly = readonly
        if readonly:
            return
        metadata.create_all(self.engine)
        with self._tx() as conn:
            _add_missing_columns(conn)
            if conn.execute(select(META.c.value).where(META.c.name == "schema_version")).first() is None:
                conn.execute(insert(META).values(name="schema_version", value=str(SCHEMA_VERSION)))

    # -- plumbing ---------------------------------------------------------------------------------------------------
    def _cols(self, table: Table) -> list[Any]:
        """The table's columns this database has (all of them unless opened read-only on an older schema)."""
        if not self.readonly:
            return list(table.columns)
        if not hasattr(self, "_present"):
            from sqlalchemy import inspect

            insp = inspect(self.engine)
            self._present = {t: {c["name"] for c in insp.get_columns(t)} for t in insp.get_table_names()}
        have = self._present.get(table.name, set())
        return [c for c in table.columns if c.name in have]

    def _rows(self, table: Table, *where: Any, order: Any = None) -> list[dict[str, Any]]:
        """Rows of `table` as dicts with every column of today's schema (None where an older database has none)."""
        cols = self._cols(table)
        if not cols:
            return []
        q = select(*cols).where(*where)
        if order is not None:
            q = q.order_by(*order)
        with self.engine.connect() as conn:
            return [{c.name: None for c in table.columns} | dict(r) for r in conn.execute(q).mappings()]


    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:  # commits on success, rolls back on error
            yield conn

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def pragma(self, name: str) -> Any:
        """A SQLite PRAGMA's current value (e.g. `journal_mode` -> "wal"); None on other databases."""
        if self.engine.dialect.name != "sqlite" or not re.fullmatch(r"[a-z_]+", name):
            return None
        with self.engine.connect() as conn:
            return conn.exec_driver_sql(f"PRAGMA {name}").scalar()

    def integrity_check(self) -> str:
        with self.engine.connect() as conn:
            if self.engine.dialect.name != "sqlite":
                return "ok"
            return str(conn.execute(text("PRAGMA integrity_check")).scalar())

    # -- runs -------------------------------------------------------------------------------------------------------
    def create_run(self, config: Mapping[str, Any], run_id: str | None = None, status: str = "running") -> str:
        """Records a run; refuses (SecretInConfig) a config holding a key-looking value."""
        config = _jsonable(dict(config), "run config")
        bad = find_secrets(config)
        if bad:
            raise SecretInConfig(
                "refusing to store a run config that looks like it holds an API key at "
                + ", ".join(bad[:5])
                + " (reference keys by environment-variable name instead)"
            )
        run_id = run_id or time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:8]
        now = time.time()
        with self._tx() as conn:
            conn.execute(insert(RUNS).values(id=run_id, config=config, created=now, updated=now, status=status))
        return run_id

    def set_run_status(self, run_id: str, status: str) -> None:
        with self._tx() as conn:
            res = conn.execute(update(RUNS).where(RUNS.c.id == run_id).values(status=status, updated=time.time()))
            if res.rowcount == 0:
                raise StoreError(f"no run {run_id!r}")

    def run(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(RUNS).where(RUNS.c.id == run_id)).mappings().first()
            return dict(row) if row else None

    def runs(self) -> list[dict[str, Any]]:
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(select(RUNS).order_by(RUNS.c.created, RUNS.c.id)).mappings()]

    # -- programs and verdicts ----------------------------------------------------------------------------------------
    def add_program(
        self,
        run_id: str,
        code: str,
        *,
        digest: str | None = None,
        parent_id: int | None = None,
        island: int = 0,
        round: int = 0,
        features: Mapping[str, Any] | None = None,
        pending: bool = False,
        name: str | None = None,
        outcome: str | None = None,
    ) -> int:
        """Records a program; returns its id (increasing in insertion order). `name` is an optional stable name
        (the engine's "r3c1"), unique in the run; `pending=True` also marks the program in flight, and `outcome`
        sets the outcome of the answer it came from (`add_answer`, keyed by `name`), in the same transaction.
        A digest or name already in the run raises DuplicateProgram."""
        if digest is None:
            from kernelsmith.candidate import Candidate

            digest = Candidate(code).digest
        feats = _jsonable(dict(features), "features") if features is not None else None
        now = time.time()
        try:
            with self._tx() as conn:
                pid = conn.execute(
                    insert(PROGRAMS).values(
                        run_id=run_id, code=code, digest=digest, name=name, parent_id=parent_id, island=island,
                        round=round, features=feats, created=now,
                    )
                ).inserted_primary_key[0]
                if pending:
                    conn.execute(insert(PENDING).values(program_id=pid, run_id=run_id, created=now))
                if outcome is not None and name is not None:
                    self._set_outcome(conn, run_id, name, outcome)
        except IntegrityError as exc:
            if self.has_digest(run_id, digest):
                raise DuplicateProgram(f"run {run_id!r} already has a program with digest {digest}") from None
            if name is not None and self.program_id_by_name(run_id, name) is not None:
                raise DuplicateProgram(f"run {run_id!r} already has a program named {name!r}") from None
            raise StoreError(f"cannot add program to run {run_id!r}: {exc.orig}") from None
        return int(pid)

    def has_digest(self, run_id: str, digest: str) -> bool:
        with self.engine.connect() as conn:
            q = select(PROGRAMS.c.id).where(PROGRAMS.c.run_id == run_id, PROGRAMS.c.digest == digest)
            return conn.execute(q).first() is not None

    def program_id_for(self, run_id: str, digest: str) -> int | None:
        with self.engine.connect() as conn:
            q = select(PROGRAMS.c.id).where(PROGRAMS.c.run_id == run_id, PROGRAMS.c.digest == digest)
            return conn.execute(q).scalar()

    def program_id_by_name(self, run_id: str, name: str) -> int | None:
        with self.engine.connect() as conn:
            q = select(PROGRAMS.c.id).where(PROGRAMS.c.run_id == run_id, PROGRAMS.c.name == name)
            return conn.execute(q).scalar()

    def program(self, program_id: int) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(self._program_query().where(PROGRAMS.c.id == program_id)).mappings().first()
            return dict(row) if row else None

    @staticmethod
    def _program_query() -> Any:
        return select(
            PROGRAMS,
            VERDICTS.c.verdict,
            VERDICTS.c.score,
            VERDICTS.c.status,
            VERDICTS.c.speedup,
        ).select_from(PROGRAMS.outerjoin(VERDICTS, VERDICTS.c.program_id == PROGRAMS.c.id))

    def programs(self, run_id: str, *, since_id: int = 0) -> list[dict[str, Any]]:
        """The run's programs in insertion order, each with its verdict (`verdict`, `score`, `status`,
        `speedup` are None while it has none)."""
        q = self._program_query().where(PROGRAMS.c.run_id == run_id, PROGRAMS.c.id > since_id)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q.order_by(PROGRAMS.c.id)).mappings()]

    def count_programs(self, run_id: str) -> int:
        with self.engine.connect() as conn:
            q = select(func.count()).select_from(PROGRAMS).where(PROGRAMS.c.run_id == run_id)
            return int(conn.execute(q).scalar() or 0)

    def add_verdict(self, program_id: int, verdict: Verdict | Mapping[str, Any], score: float | None = None) -> float:
        """Records (or replaces) a program's verdict and clears its pending row, in one transaction; returns
        the score (computed by `workshop.score.score` when not given)."""
        from kernelsmith.workshop.score import score as score_of
        from kernelsmith.workshop.score import speedup_of, status_of

        d = verdict.to_dict() if isinstance(verdict, Verdict) else dict(verdict)
        d = _redact_json(_jsonable(d, "verdict"))
        s = float(score if score is not None else score_of(d))
        with self._tx() as conn:
            conn.execute(delete(VERDICTS).where(VERDICTS.c.program_id == program_id))
            try:
                conn.execute(
                    insert(VERDICTS).values(
                        program_id=program_id, verdict=d, score=s, status=status_of(d), speedup=speedup_of(d),
                        created=time.time(),
                    )
                )
            except IntegrityError:
                raise StoreError(f"no program {program_id}") from None
            conn.execute(delete(PENDING).where(PENDING.c.program_id == program_id))
        return s

    def verdict_for(self, program_id: int) -> dict[str, Any] | None:
        """The verdict dict (`Verdict.to_dict()` form) recorded for a program, or None."""
        with self.engine.connect() as conn:
            return conn.execute(select(VERDICTS.c.verdict).where(VERDICTS.c.program_id == program_id)).scalar()

    # -- in-flight work -------------------------------------------------------------------------------------------------
    def mark_pending(self, program_id: int) -> None:
        with self._tx() as conn:
            run_id = conn.execute(select(PROGRAMS.c.run_id).where(PROGRAMS.c.id == program_id)).scalar()
            if run_id is None:
                raise StoreError(f"no program {program_id}")
            if conn.execute(select(PENDING.c.program_id).where(PENDING.c.program_id == program_id)).first() is None:
                conn.execute(insert(PENDING).values(program_id=program_id, run_id=run_id, created=time.time()))

    def clear_pending(self, program_id: int | None = None, *, run_id: str | None = None) -> int:
        """Clears one program's pending row, or all of a run's; returns how many rows went."""
        with self._tx() as conn:
            q = delete(PENDING)
            if program_id is not None:
                q = q.where(PENDING.c.program_id == program_id)
            elif run_id is not None:
                q = q.where(PENDING.c.run_id == run_id)
            else:
                raise StoreError("clear_pending needs a program_id or a run_id")
            return int(conn.execute(q).rowcount or 0)

    def pending(self, run_id: str) -> list[int]:
        """Ids of the run's programs handed to the referee whose verdict was never recorded, oldest first."""
        with self.engine.connect() as conn:
            q = select(PENDING.c.program_id).where(PENDING.c.run_id == run_id).order_by(PENDING.c.program_id)
            return [int(r) for r in conn.execute(q).scalars()]

    # -- prompts and the response cache ---------------------------------------------------------------------------------
    def add_prompt(
        self,
        run_id: str,
        text: str,
        *,
        round: int = 0,
        island: int = 0,
        parent_id: int | None = None,
        hash: str | None = None,
        child: str | None = None,
        messages: list[dict[str, Any]] | None = None,
        shown: Mapping[str, Any] | None = None,
    ) -> int:
        """Records a prompt (key-shaped strings redacted); `hash` defaults to the sha256 of the text as given.
        `messages`: the chat messages as sent; `shown`: the names of the programs the prompt showed.

        With `child` (the name of the program the prompt asks for) a prompt is recorded once per child: a
        resumed run that builds the same prompt again gets the existing row's id."""
        h = hash or text_hash(text)
        with self._tx() as conn:
            if child is not None:
                found = conn.execute(select(PROMPTS.c.id).where(PROMPTS.c.run_id == run_id, PROMPTS.c.child == child,
                                                                PROMPTS.c.hash == h)).first()
                if found is not None:
                    return int(found[0])
            pid = conn.execute(
                insert(PROMPTS).values(
                    run_id=run_id, round=round, island=island, parent_id=parent_id, text=redact(text), hash=h,
                    created=time.time(), child=child,
                    messages=_redact_json(_jsonable(messages, "messages")) if messages is not None else None,
                    shown=_jsonable(dict(shown), "shown") if shown is not None else None,
                )
            ).inserted_primary_key[0]
        return int(pid)

    def prompts(self, run_id: str) -> list[dict[str, Any]]:
        return self._rows(PROMPTS, PROMPTS.c.run_id == run_id, order=(PROMPTS.c.id,))

    def cache_response(
        self, prompt_hash: str, model: str, text: str, usage: Mapping[str, Any] | None = None, *, sample: int = 0
    ) -> bool:
        """Caches a model response for replay; the first response for (prompt_hash, model, sample) wins.
        Returns whether this call stored it."""
        u = _redact_json(_jsonable(dict(usage), "usage")) if usage is not None else None
        try:
            with self._tx() as conn:
                key = (
                    RESPONSES.c.prompt_hash == prompt_hash, RESPONSES.c.model == model, RESPONSES.c.sample == sample
                )
                if conn.execute(select(RESPONSES.c.id).where(*key)).first() is not None:
                    return False
                conn.execute(
                    insert(RESPONSES).values(
                        prompt_hash=prompt_hash, model=model, sample=sample, text=redact(text), usage=u,
                        created=time.time(),
                    )
                )
        except IntegrityError:  # a concurrent writer stored the same key first
            return False
        return True

    def cached_response(self, prompt_hash: str, model: str | None = None, sample: int = 0) -> dict[str, Any] | None:
        """{"text", "model", "usage", "sample"} cached for the prompt hash (any model when `model` is None)."""
        q = select(RESPONSES.c.text, RESPONSES.c.model, RESPONSES.c.usage, RESPONSES.c.sample).where(
            RESPONSES.c.prompt_hash == prompt_hash, RESPONSES.c.sample == sample
        )
        if model is not None:
            q = q.where(RESPONSES.c.model == model)
        with self.engine.connect() as conn:
            row = conn.execute(q.order_by(RESPONSES.c.id)).mappings().first()
            return dict(row) if row else None

    # -- the model's answers, by child ----------------------------------------------------------------------------------
    def add_answer(self, run_id: str, child: str, prompt_hash: str, model: str, text: str,
                   usage: Mapping[str, Any] | None = None, *, spent: bool = True) -> bool:
        """Records what the child `child` was answered (key-shaped strings redacted); the first answer per child
        wins, so a resumed run can never pair a child with another answer. Returns whether this call stored it.

        Committed the moment it arrives (an answer is paid for then), before the program parsed from it: a
        program therefore never exists without its answer, and a resume re-derives the same program from it."""
        u = _redact_json(_jsonable(dict(usage), "usage")) if usage is not None else None
        try:
            with self._tx() as conn:
                key = (ANSWERS.c.run_id == run_id, ANSWERS.c.child == child)
                if conn.execute(select(ANSWERS.c.child).where(*key)).first() is not None:
                    return False
                conn.execute(insert(ANSWERS).values(
                    run_id=run_id, child=child, prompt_hash=prompt_hash, model=model, text=redact(text), usage=u,
                    spent=int(spent), outcome=None, created=time.time()))
        except IntegrityError:
            if self.answer(run_id, child) is not None:  # a concurrent writer stored it first
                return False
            raise StoreError(f"no run {run_id!r}") from None
        return True

    def answer(self, run_id: str, child: str) -> dict[str, Any] | None:
        """{"child", "prompt_hash", "model", "text", "usage", "spent", "outcome", "created"} or None."""
        rows = self._rows(ANSWERS, ANSWERS.c.run_id == run_id, ANSWERS.c.child == child)
        return _answer_row(rows[0]) if rows else None

    def answers(self, run_id: str) -> list[dict[str, Any]]:
        """The run's answers in the order they arrived (none in a database older than schema 2)."""
        rows = self._rows(ANSWERS, ANSWERS.c.run_id == run_id, order=(ANSWERS.c.created, ANSWERS.c.child))
        return [_answer_row(r) for r in rows]

    def set_answer_outcome(self, run_id: str, child: str, outcome: str) -> None:
        """What became of an answer that made no program (a duplicate)."""
        with self._tx() as conn:
            self._set_outcome(conn, run_id, child, outcome)

    @staticmethod
    def _set_outcome(conn: Connection, run_id: str, child: str, outcome: str) -> None:
        if outcome not in ("program", "duplicate", "unusable"):
            raise StoreError(f"unknown answer outcome {outcome!r}")
        conn.execute(update(ANSWERS).where(ANSWERS.c.run_id == run_id, ANSWERS.c.child == child)
                     .values(outcome=outcome))

    def last_write(self, run_id: str) -> float | None:
        """When the run last recorded anything (an answer, a prompt, a program, a verdict or an event)."""
        with self.engine.connect() as conn:
            times = [
                conn.execute(select(func.max(ANSWERS.c.created)).where(ANSWERS.c.run_id == run_id)).scalar(),
                conn.execute(select(func.max(PROMPTS.c.created)).where(PROMPTS.c.run_id == run_id)).scalar(),
                conn.execute(select(func.max(PROGRAMS.c.created)).where(PROGRAMS.c.run_id == run_id)).scalar(),
                conn.execute(select(func.max(VERDICTS.c.created)).select_from(
                    VERDICTS.join(PROGRAMS, VERDICTS.c.program_id == PROGRAMS.c.id)).where(
                    PROGRAMS.c.run_id == run_id)).scalar(),
                conn.execute(select(func.max(EVENTS.c.created)).where(EVENTS.c.run_id == run_id)).scalar(),
            ]
        known = [float(t) for t in times if t is not None]
        return max(known) if known else None

    # -- counters and events ----------------------------------------------------------------------------------------------
    def set_counter(self, run_id: str, name: str, value: Any) -> None:
        self.set_counters(run_id, {name: value})

    def set_counters(self, run_id: str, values: Mapping[str, Any]) -> None:
        """Several counters in one transaction: a kill leaves all of them or none."""
        vals = {n: _jsonable(v, f"counter {n!r}") for n, v in values.items()}
        now = time.time()
        with self._tx() as conn:
            for name, v in vals.items():
                res = conn.execute(update(COUNTERS).where(COUNTERS.c.run_id == run_id, COUNTERS.c.name == name)
                                   .values(value=v, updated=now))
                if res.rowcount == 0:
                    try:
                        conn.execute(insert(COUNTERS).values(run_id=run_id, name=name, value=v, updated=now))
                    except IntegrityError:
                        raise StoreError(f"no run {run_id!r}") from None

    def counter(self, run_id: str, name: str, default: Any = None) -> Any:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(COUNTERS.c.value).where(COUNTERS.c.run_id == run_id, COUNTERS.c.name == name)
            ).first()
            return default if row is None else row[0]

    def counters(self, run_id: str) -> dict[str, Any]:
        with self.engine.connect() as conn:
            q = select(COUNTERS.c.name, COUNTERS.c.value).where(COUNTERS.c.run_id == run_id).order_by(COUNTERS.c.name)
            return {n: v for n, v in conn.execute(q)}

    def log_event(self, run_id: str, kind: str, data: Mapping[str, Any] | None = None) -> int:
        d = _redact_json(_jsonable(dict(data), "event data")) if data is not None else None
        with self._tx() as conn:
            eid = conn.execute(
                insert(EVENTS).values(run_id=run_id, kind=kind, data=d, created=time.time())
            ).inserted_primary_key[0]
        return int(eid)

    def events(self, run_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        q = select(EVENTS).where(EVENTS.c.run_id == run_id)
        if kind is not None:
            q = q.where(EVENTS.c.kind == kind)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(q.order_by(EVENTS.c.id)).mappings()]
