"""The run store on a real PostgreSQL server: the same tables and writes as on SQLite (a throwaway server on a
unix socket in a temp dir; started as an unprivileged user when the tests run as root, since postgres refuses
root). Skipped where no server can be started, except under CI=true, where .ci/run installs one."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelsmith.workshop.store import DuplicateProgram, RunStore, StoreError


def _pg_bin() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parent.parent.name)
    return versions[-1].parent if versions else None


def _skip(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"PostgreSQL is needed under CI=true (.ci/run installs it): {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _skip("psycopg is not installed (bash scripts/setup.sh test)")
    bindir = _pg_bin()
    if bindir is None:
        _skip("no PostgreSQL server binaries (Debian: apt-get install postgresql)")
    assert bindir is not None
    base = Path(tempfile.mkdtemp(prefix="ks-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # postgres will not run as root: as nobody, in a dir nobody owns
        user = pwd.getpwnam("nobody")
        for path in (base, sock):
            os.chown(path, user.pw_uid, user.pw_gid)
        prefix = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
    env = {**os.environ, "LC_ALL": "C"}
    try:
        subprocess.run([*prefix, str(bindir / "initdb"), "-D", str(data), "-U", "ks", "-A", "trust", "-E", "UTF8"], check=True,
                       capture_output=True, timeout=120, env=env)
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(base / "log"), "-w", "-o",
                        f"-c listen_addresses='' -c unix_socket_directories={sock} -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=120, env=env)
    except (subprocess.SubprocessError, OSError) as exc:
        log = (base / "log").read_text() if (base / "log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        _skip(f"could not start a PostgreSQL server: {exc} {getattr(exc, 'stderr', b'')!r} {log[-500:]}")
    try:
        yield f"postgresql+psycopg://ks@/postgres?host={sock}"
    finally:
        subprocess.run([*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True, timeout=60, env=env)
        shutil.rmtree(base, ignore_errors=True)


def test_a_run_is_recorded_on_postgresql_as_on_sqlite(pg_url: str) -> None:
    store = RunStore(pg_url)
    try:
        run = store.create_run({"task": "t.py", "population": 4})
        seed = store.add_program(run, "code 0", name="seed", features={"n_kernels": 1}, round=-1)
        assert store.add_answer(run, "r0c0", "h" * 64, "model", "answer", {"prompt_tokens": 3})
        assert not store.add_answer(run, "r0c0", "h" * 64, "model", "another")  # first answer per child wins
        child = store.add_program(run, "code 1", name="r0c0", parent_id=seed, pending=True, outcome="program")
        with pytest.raises(DuplicateProgram):
            store.add_program(run, "code 1", name="r0c1")
        store.add_prompt(run, "[system]\nS\n\n[user]\nU", round=0, parent_id=seed, child="r0c0",
                         messages=[{"role": "system", "content": "S"}], shown={"parent": "seed", "top": []})
        assert store.pending(run) == [child]
        store.add_verdict(child, {"status": "correct", "correct": True, "speedup": 1.5, "guards": []})
        assert store.pending(run) == [] and store.verdict_for(child)["speedup"] == 1.5
        store.set_counters(run, {"rounds_done": 1, "progress": {"evaluated": 1}})
        assert store.counters(run) == {"progress": {"evaluated": 1}, "rounds_done": 1}
        (prompt,) = store.prompts(run)
        assert prompt["messages"] == [{"role": "system", "content": "S"}] and prompt["shown"]["parent"] == "seed"
        assert [(a["child"], a["outcome"]) for a in store.answers(run)] == [("r0c0", "program")]
        assert [p["name"] for p in store.programs(run)] == ["seed", "r0c0"]
        assert store.last_write(run) is not None
        with pytest.raises(StoreError):
            store.add_answer("no-such-run", "r0c0", "h", "m", "x")
    finally:
        store.close()
