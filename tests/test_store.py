"""The run store: round-trips, WAL, uniqueness, pending work across reopen and kill -9, no secrets."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateTable

from kernelsmith.referee.verdict import Finding, Status, Verdict
from kernelsmith.workshop.store import (
    DuplicateProgram,
    RunStore,
    SecretInConfig,
    StoreError,
    metadata,
    text_hash,
)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def store(tmp_path):
    s = RunStore(tmp_path / "run.db")
    yield s
    s.close()


def test_round_trips(store):
    config = {"task": "tasks/level1/01_relu.py", "islands": 4, "proposer": {"model": "m", "max_tokens": 4096}}
    run = store.create_run(config)
    assert store.run(run)["config"] == config
    assert store.run(run)["status"] == "running"
    store.set_run_status(run, "done")
    assert store.run(run)["status"] == "done"
    assert [r["id"] for r in store.runs()] == [run]

    a = store.add_program(run, "a = 1\n", island=1, round=0, features={"n_kernels": 1, "tile_sizes": [1024]})
    b = store.add_program(run, "b = 2\n", parent_id=a, island=2, round=1)
    c = store.add_program(run, "c = 3\n", parent_id=b, island=2, round=1)
    rows = store.programs(run)
    assert [r["id"] for r in rows] == [a, b, c] and a < b < c
    assert rows[0]["features"] == {"n_kernels": 1, "tile_sizes": [1024]}
    assert (rows[1]["parent_id"], rows[1]["island"], rows[1]["round"], rows[1]["code"]) == (a, 2, 1, "b = 2\n")
    assert rows[0]["verdict"] is None and rows[0]["score"] is None
    assert store.count_programs(run) == 3
    named = store.add_program(run, "d = 4\n", name="r1c0", parent_id=c)
    assert store.program_id_by_name(run, "r1c0") == named and store.program_id_by_name(run, "nope") is None
    assert store.program(named)["name"] == "r1c0" and store.program(a)["name"] is None
    with pytest.raises(DuplicateProgram):
        store.add_program(run, "e = 5\n", name="r1c0")
    assert store.program(999) is None
    assert [r["id"] for r in store.programs(run, since_id=a)] == [b, c, named]

    v = Verdict(Status.CORRECT, speedup=1.5, speedup_ci=[1.4, 1.6], guards=[Finding("x", "y")], trials=5)
    s = store.add_verdict(a, v)
    assert s == pytest.approx(1.0 + 0.5849625, abs=1e-6)
    assert Verdict.from_dict(store.verdict_for(a)) == v
    assert store.verdict_for(b) is None
    store.add_verdict(b, {"status": "compile_error", "error": "SyntaxError"}, score=0.25)
    rows = store.programs(run)
    assert rows[0]["verdict"]["speedup_ci"] == [1.4, 1.6]
    assert (rows[0]["status"], rows[0]["speedup"]) == ("correct", 1.5)
    assert (rows[1]["status"], rows[1]["score"]) == ("compile_error", 0.25)
    store.add_verdict(b, {"status": "runtime_error"})  # a re-evaluation replaces the verdict
    assert store.verdict_for(b) == {"status": "runtime_error"}

    h = text_hash("prompt one")
    p = store.add_prompt(run, "prompt one", round=1, island=2, parent_id=a)
    assert store.prompts(run)[0] | {"created": 0} == {
        "id": p, "run_id": run, "round": 1, "island": 2, "parent_id": a, "text": "prompt one", "hash": h,
        "created": 0, "child": None, "messages": None, "shown": None,
    }
    assert store.cached_response(h) is None
    assert store.cache_response(h, "model-a", "answer", {"prompt_tokens": 10})
    assert not store.cache_response(h, "model-a", "other answer")  # first response wins: replay is stable
    assert store.cache_response(h, "model-a", "second sample", sample=1)
    assert store.cached_response(h) == {"text": "answer", "model": "model-a", "usage": {"prompt_tokens": 10}, "sample": 0}
    assert store.cached_response(h, "model-a", sample=1)["text"] == "second sample"
    assert store.cached_response(h, "model-b") is None

    assert store.counter(run, "round") is None and store.counter(run, "round", 0) == 0
    store.set_counter(run, "round", 3)
    store.set_counter(run, "round", 4)
    store.set_counter(run, "archive_digest", "abc")
    assert store.counter(run, "round") == 4 and store.counters(run) == {"archive_digest": "abc", "round": 4}
    store.log_event(run, "round_start", {"round": 1})
    store.log_event(run, "migrate", {"moved": 3})
    assert [(e["kind"], e["data"]) for e in store.events(run)] == [("round_start", {"round": 1}), ("migrate", {"moved": 3})]
    assert len(store.events(run, "migrate")) == 1


def test_wal_and_pragmas(tmp_path):
    path = tmp_path / "run.db"
    with RunStore(path) as s:
        assert s.pragma("journal_mode") == "wal"
        assert s.pragma("synchronous") == 1  # NORMAL
        assert s.pragma("foreign_keys") == 1
        s.create_run({"a": 1})
        assert (tmp_path / "run.db-wal").exists()
    con = sqlite3.connect(path)  # WAL is a property of the file: a plain connection sees it too
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.close()


def test_foreign_keys_enforced(store):
    run = store.create_run({})
    with pytest.raises(StoreError):
        store.add_program("no-such-run", "x = 1")
    with pytest.raises(StoreError):
        store.add_program(run, "x = 1", parent_id=999)
    with pytest.raises(StoreError):
        store.add_verdict(999, {"status": "correct"})
    with pytest.raises(StoreError):
        store.mark_pending(999)


def test_schema_is_portable():
    from sqlalchemy import types

    generic = (types.Integer, types.Float, types.String, types.Text, types.JSON)
    for table in metadata.sorted_tables:
        for col in table.columns:
            assert type(col.type).__module__.startswith("sqlalchemy.sql"), (table.name, col.name, col.type)
            assert isinstance(col.type, generic), (table.name, col.name, col.type)
        CreateTable(table).compile(dialect=postgresql.dialect())  # compiles for PostgreSQL


def test_unique_digest_per_run(store):
    r1, r2 = store.create_run({"n": 1}), store.create_run({"n": 2})
    pid = store.add_program(r1, "x = 1  # a comment\n")
    with pytest.raises(DuplicateProgram):
        store.add_program(r1, "x   =   1\n")  # same normalised source, same digest
    with pytest.raises(DuplicateProgram):
        store.add_program(r1, "y = 2\n", digest=store.programs(r1)[0]["digest"])
    assert store.has_digest(r1, store.programs(r1)[0]["digest"])
    assert store.program_id_for(r1, store.programs(r1)[0]["digest"]) == pid
    store.add_program(r2, "x = 1\n")  # another run may hold the same program
    assert not store.has_digest(r1, "0" * 16)
    assert store.count_programs(r1) == 1 and store.count_programs(r2) == 1


def test_pending_survives_reopen(tmp_path):
    path = tmp_path / "run.db"
    with RunStore(path) as s:
        run = s.create_run({})
        a = s.add_program(run, "a = 1", pending=True)
        b = s.add_program(run, "b = 1")
        s.mark_pending(b)
        s.mark_pending(b)  # idempotent
        c = s.add_program(run, "c = 1", pending=True)
        s.add_verdict(c, {"status": "correct"})  # recording the verdict clears the row
        assert s.pending(run) == [a, b]
    with RunStore(path) as s:
        assert s.pending(run) == [a, b]
        assert s.clear_pending(a) == 1
        assert s.pending(run) == [b]
    with RunStore(path) as s:
        assert s.pending(run) == [b]
        assert s.clear_pending(run_id=run) == 1
        assert s.pending(run) == []


WRITER = """
import sys
from kernelsmith.workshop.store import RunStore
s = RunStore(sys.argv[1])
run = s.create_run({"crash": True}, run_id="crash")
i = 0
while True:
    pid = s.add_program(run, f"x = {i}\\n", round=i // 10, features={"i": i}, pending=True)
    if i % 2 == 0:
        s.add_verdict(pid, {"status": "correct", "speedup": 1.0 + i / 1000})
    s.set_counter(run, "n", i)
    print(i, pid, flush=True)
    i += 1
"""


def test_kill_9_mid_run_loses_nothing_committed(tmp_path):
    path = tmp_path / "run.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env
    )
    acked: list[tuple[int, int]] = []
    deadline = time.monotonic() + 120
    try:
        while len(acked) < 150 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            i, pid = map(int, line.split())
            acked.append((i, pid))
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # mid-write, most likely
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert len(acked) >= 20, "the writer did not get going"

    with RunStore(path) as s:
        assert s.integrity_check() == "ok"
        rows = s.programs("crash")
        by_id = {r["id"]: r for r in rows}
        # every acknowledged (committed) write is there, and the writer's history is an unbroken prefix (it may
        # have run ahead of what we read from the pipe): nothing committed was lost, nothing half-written exists
        assert len(rows) >= len(acked)
        assert [r["code"] for r in rows] == [f"x = {i}\n" for i in range(len(rows))]
        for i, r in enumerate(rows[:-1]):  # only the last program may lack the verdict it was about to get
            assert (r["verdict"] is not None) == (i % 2 == 0)
        for i, pid in acked:
            assert by_id[pid]["code"] == f"x = {i}\n" and by_id[pid]["features"] == {"i": i}
            if i % 2 == 0:
                assert by_id[pid]["status"] == "correct"
                assert s.verdict_for(pid)["speedup"] == pytest.approx(1.0 + i / 1000)
        assert s.counter("crash", "n") >= acked[-1][0]
        # the in-flight work is known: exactly the programs without a verdict
        assert s.pending("crash") == [r["id"] for r in rows if r["verdict"] is None]
        assert {pid for i, pid in acked if i % 2} <= set(s.pending("crash"))
        # and the store keeps working after the crash
        s.add_program("crash", "after = 1\n")


@pytest.mark.parametrize(
    "config",
    [
        {"api_key": "abc123"},
        {"proposer": {"openai_api_key": "not-an-env-name"}},
        {"proposer": {"apiKey": "x"}},
        {"token": "t0k3n"},
        {"hf_token": "whatever"},
        {"secret": "s"},
        {"model": "sk-abcdefghijklmnop"},
        {"notes": ["fine", "sk-proj-abcdefghij1234567890"]},
        {"headers": {"Authorization": "Bearer abcdefghijklmnopqrstuvwxyz"}},
        {"endpoint": {"password": "hunter2"}},
    ],
)
def test_refuses_key_looking_config(store, config):
    with pytest.raises(SecretInConfig):
        store.create_run(config)
    assert store.runs() == []  # nothing was written


def test_secret_value_never_in_error_message(store):
    with pytest.raises(SecretInConfig) as exc:
        store.create_run({"proposer": {"api_key": "supersecretvalue123"}})
    assert "supersecretvalue123" not in str(exc.value)
    assert "config.proposer.api_key" in str(exc.value)


@pytest.mark.parametrize(
    "config",
    [
        {"api_key_env": "OPENAI_API_KEY"},
        {"api_key": "OPENAI_API_KEY"},  # an environment-variable name, not a key
        {"api_key": ""},
        {"max_tokens": 4096, "token_budget": 100000},
        {"key_file": "/run/secrets/openai"},
        {"model": "gpt-4o-mini", "temperature": 0.8, "tags": ["sk", "desk-top"]},
    ],
)
def test_accepts_clean_config(store, config):
    run = store.create_run(config)
    assert store.run(run)["config"] == config


def test_key_shaped_text_is_redacted(store):
    run = store.create_run({})
    store.add_prompt(run, "use key sk-abcdefghijklmnop1234 please", hash="h1")
    assert "sk-abcdefghijklmnop1234" not in store.prompts(run)[0]["text"]
    store.cache_response("h1", "m", "here: ghp_abcdefghijklmnopqrstuvwx", {"note": "sk-abcdefghijklmnop1234"})
    cached = store.cached_response("h1")
    assert "ghp_" not in cached["text"] and "sk-" not in str(cached["usage"])
    assert store.prompts(run)[0]["hash"] == "h1"


def test_prompt_recorded_once_per_child_and_old_databases_gain_the_column(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    store = RunStore(db)
    run = store.create_run({"task": "t"})
    first = store.add_prompt(run, "round 1 prompt", round=1, child="r1c0")
    assert store.add_prompt(run, "round 1 prompt", round=1, child="r1c0") == first  # a resumed run's rebuild
    other = store.add_prompt(run, "round 1 prompt, changed", round=1, child="r1c0")  # different text: kept
    assert other != first and [p["child"] for p in store.prompts(run)] == ["r1c0", "r1c0"]
    store.close()
    con = sqlite3.connect(db)  # a database written before the column existed
    con.execute("ALTER TABLE prompts DROP COLUMN child")
    con.commit()
    con.close()
    store = RunStore(db)
    assert [p["child"] for p in store.prompts(run)] == [None, None]
    store.add_prompt(run, "round 2 prompt", round=2, child="r2c0")
    assert store.prompts(run)[-1]["child"] == "r2c0"
    store.close()


def test_answers_are_kept_by_child_first_wins_with_their_outcome(store):
    """Two siblings asked the same prompt get two answers, each under its own name; a second answer for the
    same child is refused (a resume can never pair a child with another answer); the outcome is written with
    the program, in its transaction."""
    run = store.create_run({"task": "t.py"})
    h = text_hash("the same prompt")
    assert store.add_answer(run, "r0c0", h, "m", "answer A", {"prompt_tokens": 10, "cost_usd": 0.5})
    assert store.add_answer(run, "r0c1", h, "m", "answer B", spent=False)
    assert not store.add_answer(run, "r0c0", h, "m", "answer C")
    a = store.answer(run, "r0c0")
    assert (a["text"], a["usage"], a["spent"], a["outcome"]) == ("answer A", {"prompt_tokens": 10, "cost_usd": 0.5},
                                                                 True, None)
    store.add_program(run, "code A", name="r0c0", outcome="program", pending=True)
    store.set_answer_outcome(run, "r0c1", "duplicate")
    assert [(x["child"], x["outcome"], x["spent"]) for x in store.answers(run)] == [
        ("r0c0", "program", True), ("r0c1", "duplicate", False)]
    with pytest.raises(StoreError):
        store.set_answer_outcome(run, "r0c1", "lost")
    with pytest.raises(StoreError):
        store.add_answer("no-such-run", "r0c0", h, "m", "x")
    assert store.last_write(run) >= store.answer(run, "r0c1")["created"]


def test_counters_set_together(store):
    run = store.create_run({"task": "t.py"})
    store.set_counters(run, {"rounds_done": 3, "progress": {"evaluated": 12}})
    store.set_counters(run, {"rounds_done": 4})
    assert store.counters(run) == {"progress": {"evaluated": 12}, "rounds_done": 4}
    with pytest.raises(StoreError):
        store.set_counters("no-such-run", {"rounds_done": 1})
