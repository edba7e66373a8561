"""The run's one typed record (`workshop.record.RunReader`): everything the coach, the report and the CLI read,
from a real run, read-only, and from a database recorded before answers and messages were kept."""

from __future__ import annotations

import hashlib
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from resume_driver import TASK, judge  # noqa: E402

from kernelsmith.coach.trajectories import load_steps, shown_programs  # noqa: E402
from kernelsmith.workshop.config import RunConfig  # noqa: E402
from kernelsmith.workshop.record import RunReader, RunReadError  # noqa: E402
from kernelsmith.workshop.run import evolve  # noqa: E402


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("record") / "run"
    cfg = RunConfig(task=TASK, rounds=3, population=3, islands=1, device="cpu", proposer="offline", run_dir=d,
                    seed=5, inspirations=2)
    summary = evolve(cfg, judge=judge)
    assert summary["rounds_done"] == 3
    return d


def test_the_record_is_typed_and_complete(run_dir: Path) -> None:
    with RunReader(run_dir) as run:
        programs, prompts, answers = run.programs(), run.prompts(), run.answers()
        names = {p.name for p in programs}
        assert all(p.features and "n_kernels" in p.features for p in programs if not p.unusable)
        assert all(p.parent is None or p.parent in names for p in programs)
        assert {p.child for p in prompts} == {a.child for a in answers} == {f"r{r}c{i}" for r in range(3)
                                                                              for i in range(3)}
        for pr in prompts:  # the messages as sent, proven by their digest; what each prompt showed, by name
            assert pr.verified and pr.messages[0]["role"] == "system"
            assert set(pr.shown) == {"parent", "top", "diverse", "failures"}
            assert all(n in names for n in [*pr.shown["top"], *pr.shown["diverse"], *pr.shown["failures"]])
        assert any(pr.shown["top"] for pr in prompts)
        # the names agree with what the prompt text shows (the coach reads the names now, not the text)
        for pr in prompts:
            by_text = [s.digest for s in shown_programs(pr.messages[-1]["content"])]
            by_name = [next(p.digest for p in programs if p.name == n) for n in pr.shown["top"] + pr.shown["diverse"]]
            assert by_text == by_name
        assert {a.outcome for a in answers} <= {"program", "duplicate", "unusable"}
        outcomes = {a.child: a.outcome for a in answers}
        assert all(outcomes[p.name] in ("program", "unusable") for p in programs if p.round >= 0)
        # the archive as a resumed run rebuilds it: the run's own digest
        assert run.archive().snapshot_digest() == run.summary()["archive_digest"]
        assert run.rounds_done() == 3 and run.counters()["progress"]["proposed"] == 9
        assert run.config["eval_workers"] == 1  # none asked: recorded as what it became (the CPU's one)


def test_reading_writes_nothing(run_dir: Path) -> None:
    db = run_dir / "run.db"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    with RunReader(run_dir) as run:
        run.programs()
        run.prompts()
        with pytest.raises(Exception):  # noqa: B017 - any driver error: the connection is read-only
            run.store.set_counter(run.run_id, "x", 1)
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_the_coach_links_every_step_by_name(run_dir: Path) -> None:
    (steps,) = load_steps([run_dir])
    assert not steps.unlinked and steps.steps
    with RunReader(run_dir) as run:
        shown = {pr.child: pr.shown for pr in run.prompts()}
    for step in steps.steps:
        assert len(step.shown) == len(shown[step.name]["top"]) + len(shown[step.name]["diverse"])


def test_a_run_recorded_before_schema_2_reads_as_before(run_dir: Path, tmp_path: Path) -> None:
    """Schema 1: no answers table, prompts without messages or shown: messages rebuilt from the text (and
    verified by digest), no answers, nothing else lost."""
    old = tmp_path / "old"
    old.mkdir()
    with sqlite3.connect(run_dir / "run.db") as src, sqlite3.connect(old / "run.db") as dst:
        src.backup(dst)
    with sqlite3.connect(old / "run.db") as conn:
        conn.execute("drop table answers")
        conn.execute("alter table prompts drop column messages")
        conn.execute("alter table prompts drop column shown")
    with RunReader(old) as run:
        assert run.answers() == []
        prompts = run.prompts()
        assert prompts and all(p.verified and p.shown is None for p in prompts)
        with RunReader(run_dir) as new:
            assert len(run.programs()) == len(new.programs())


def test_not_a_run_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunReadError, match="no run.db"):
        RunReader(tmp_path)
    (tmp_path / "run.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(RunReadError, match="cannot read the run database"):
        RunReader(tmp_path)


def test_the_run_records_its_ranking_rule(run_dir: Path) -> None:
    from kernelsmith.workshop.archive import RANKING_RULE

    with RunReader(run_dir) as run:
        assert run.counters()["ranking_rule"] == RANKING_RULE
