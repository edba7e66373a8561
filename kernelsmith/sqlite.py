"""One way to open a SQLite (or other SQLAlchemy URL) database for the project's stores: WAL, durable commits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer; a kill -9 loses no commit
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA busy_timeout=10000")
    finally:
        cur.close()


def _sqlite_readonly_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    try:
        cur.execute("PRAGMA busy_timeout=10000")
    finally:
        cur.close()


def open_engine(path: str | Path, *, echo: bool = False, readonly: bool = False) -> tuple[str, Engine]:
    """(url, engine) for a file path (parent dirs created) or a database URL. `readonly`: a file is opened
    read-only (a reader never writes, nor needs write access: `immutable` where even the WAL's index cannot be
    made, e.g. a run dir on a read-only mount)."""
    url = str(path)
    if "://" not in url:
        if readonly:
            url = f"sqlite:///file:{Path(url).resolve()}?mode=ro&uri=true"
            engine = create_engine(url, echo=echo)
            event.listen(engine, "connect", _sqlite_readonly_pragmas)
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("select count(*) from sqlite_master").scalar()
            except Exception:  # noqa: BLE001 - no -shm can be made next to it: read the file as it is
                engine.dispose()
                url = f"sqlite:///file:{Path(path).resolve()}?mode=ro&immutable=1&uri=true"
                engine = create_engine(url, echo=echo)
            return url, engine
        Path(url).parent.mkdir(parents=True, exist_ok=True)
        url = f"sqlite:///{Path(url)}"
    engine = create_engine(url, echo=echo)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return url, engine
