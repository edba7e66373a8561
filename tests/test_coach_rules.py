"""The coach's selection rules on hand-built run stores (RunStore's public methods, real prompts from
`build_prompt`), where speedups are set: min gain, modes, leakage, de-duplication, balancing, linking."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelsmith.candidate import Candidate
from kernelsmith.cli import app
from kernelsmith.coach.sft import build_sft, select
from kernelsmith.coach.trajectories import OPTIMISE, TRANSLATE, load_steps, split_prompt
from kernelsmith.workshop.prompt import build_prompt
from kernelsmith.workshop.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
RELU_TASK = ROOT / "tasks/level1/01_relu.py"
RELU_SOLUTION = (ROOT / "solutions/level1/01_relu.py").read_text()


def variant(block: int, warps: int = 8) -> str:
    """The shipped ReLU solution with another launch configuration (a different normalised digest)."""
    return RELU_SOLUTION.replace("BLOCK = 4096", f"BLOCK = {block}").replace("num_warps=8", f"num_warps={warps}")


@dataclass
class ShownProgram:  # what build_prompt lists as an inspiration (workshop.prompt.ProgramLike)
    code: str
    score: float
    status: str
    speedup: float | None
    error: str = ""


class RunBuilder:
    """A run dir written the way the engine writes one: prompt, cached response, program, verdict per step."""

    def __init__(self, run_dir: Path, task: Path = RELU_TASK, device: str = "cuda", islands: int = 2):
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.store = RunStore(run_dir / "run.db")
        self.run_id = self.store.create_run({"task": str(task), "device": device, "policy": "strict",
                                             "response_mode": "full", "islands": islands, "overrides": {}},
                                            run_id="main")
        self.reference = task.read_text()
        self.task_name = task.stem
        self.ids: dict[str, int] = {}
        self.codes: dict[str, str] = {}

    def step(self, name: str, code: str, *, parent: str | None = None, speedup: float | None = None,
             status: str = "correct", shown: list[ShownProgram] = (), cache: bool = True,
             response_note: str = "Here is the program.") -> int:
        rnd = int(name[1:].split("c")[0])
        island = int(name.split("c")[1]) % 2
        parent_verdict = ({"status": "correct", "speedup": None} if parent else None)
        prompt = build_prompt(task_name=self.task_name, reference=self.reference,
                              parent_code=self.codes[parent] if parent else "(none yet)",
                              parent_verdict=parent_verdict, top=list(shown), round_=rnd, island=island)
        parent_id = self.ids[parent] if parent else None
        self.store.add_prompt(self.run_id, prompt.text, round=rnd, island=island, parent_id=parent_id,
                              hash=prompt.digest)
        if cache:
            self.store.cache_response(prompt.digest, "test-model", f"{response_note}\n```python\n{code}\n```\n")
        pid = self.store.add_program(self.run_id, code, parent_id=parent_id, island=island, round=rnd, name=name)
        verdict = {"status": status, "speedup": speedup,
                   "speedup_ci": [speedup * 0.99, speedup * 1.01] if speedup else None, "guards": []}
        self.store.add_verdict(pid, verdict)
        self.ids[name], self.codes[name] = pid, code
        return pid

    def close(self) -> None:
        self.store.close()


def lineage_run(run_dir: Path) -> RunBuilder:
    """r0c0 translation (1.2x); r1c0 1.5x (gain 1.25), r1c1 1.25x (gain 1.04); r2c0 slower than its parent;
    r2c1 incorrect; r2c2 2.4x but its prompt shows a 2.5x program; r3c0 shows its own code."""
    b = RunBuilder(run_dir)
    b.step("r0c0", variant(1024), speedup=1.2)
    b.step("r1c0", variant(2048), parent="r0c0", speedup=1.5)
    b.step("r1c1", variant(512), parent="r0c0", speedup=1.25)
    b.step("r2c0", variant(2048, 4), parent="r1c0", speedup=1.4)
    b.step("r2c1", variant(8192), parent="r1c0", speedup=None, status="incorrect")
    b.step("r2c2", variant(256), parent="r1c0", speedup=2.4,
           shown=[ShownProgram(variant(128), 2.32, "correct", 2.5)])
    b.step("r3c0", variant(8192, 4), parent="r2c2", speedup=3.0,
           shown=[ShownProgram(variant(8192, 4), 1.0, "correct", None)])
    b.close()
    return b


@pytest.fixture()
def run_a(tmp_path: Path) -> Path:
    lineage_run(tmp_path / "a")
    return tmp_path / "a"


def names(samples: list[dict]) -> list[str]:
    return sorted(s["step"] for s in samples)


def test_steps_are_linked_exactly(run_a: Path) -> None:
    (run,) = load_steps([run_a])
    assert not run.unlinked and run.total_children == 7 and len(run.steps) == 7
    by = {s.name: s for s in run.steps}
    assert by["r0c0"].kind == TRANSLATE and by["r1c0"].kind == OPTIMISE
    assert all(s.lineage == "r0c0" for s in run.steps)
    assert by["r1c0"].gain == pytest.approx(1.25) and by["r0c0"].gain == pytest.approx(1.2)
    for s in run.steps:
        assert s.prompt_verified  # the rebuilt messages hash to the stored prompt digest
        assert Candidate(s.response.split("```python\n")[1].split("\n```")[0]).digest == s.child_digest
    assert [x.speedup for x in by["r2c2"].shown] == [2.5]


def test_min_gain_and_correctness(run_a: Path) -> None:
    runs = load_steps([run_a])
    sel = select(runs, mode="all", min_gain=1.0)
    assert names(sel.samples) == ["r0c0", "r1c0", "r1c1"]
    assert sel.stats["dropped"]["child not correct"] == 1
    assert sel.stats["dropped"]["later step not faster than its parent by min_gain"] == 1  # r2c0
    assert sel.stats["dropped"]["leakage: prompt shows the target or a program as good"] == 2  # r2c2, r3c0
    assert names(select(runs, mode="all", min_gain=1.1).samples) == ["r0c0", "r1c0"]
    assert names(select(runs, mode="all", min_gain=1.3).samples) == ["r0c0"]
    with pytest.raises(ValueError):
        select(runs, min_gain=0.9)


def test_sample_format_is_the_step(run_a: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "sft.jsonl"
    build_sft([run_a], out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    store = RunStore(run_a / "run.db")
    prompts = {p["hash"]: p for p in store.prompts("main")}
    for row in rows:
        roles = [m["role"] for m in row["messages"]]
        assert roles == ["system", "user", "assistant"]
        stored = prompts[row["prompt_hash"]]
        assert split_prompt(stored["text"], stored["hash"]) == (row["messages"][:2], True)
        assert row["messages"][2]["content"] == store.cached_response(row["prompt_hash"])["text"]
        assert row["level"] == "level1" and row["task"] == "01_relu" and row["weight"] == 1.0
    store.close()
    by = {r["step"]: r for r in rows}
    assert by["r1c0"]["gain"] == pytest.approx(1.25) and by["r1c0"]["parent"] == "r0c0"
    card = out.with_suffix(".md").read_text()
    assert "| 01_relu | 3 |" in card and "| level1 | 3 |" in card and "| optimise | 2 |" in card
    assert "Correctness-only" not in card


def test_modes_first_and_best(run_a: Path) -> None:
    runs = load_steps([run_a])
    assert names(select(runs, mode="first").samples) == ["r0c0"]
    assert names(select(runs, mode="best").samples) == ["r1c0"]  # gain 1.25 beats 1.2 (r0c0) and 1.04
    assert names(select(runs, mode="best", top_k=2).samples) == ["r0c0", "r1c0"]


def test_leakage_guard(run_a: Path) -> None:
    by = {s.name: s for s in load_steps([run_a])[0].steps}
    from kernelsmith.coach.sft import leaks

    assert leaks(by["r2c2"])  # shows a faster program (2.5x >= 2.4x)
    assert leaks(by["r3c0"])  # shows the target itself
    assert not leaks(by["r1c0"])


def test_dedup_across_runs_keeps_the_best(run_a: Path, tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "b")
    b.step("r0c0", variant(1024, 2), speedup=1.0)
    b.step("r1c0", variant(2048), parent="r0c0", speedup=1.1, response_note="Same target, smaller gain.")
    b.close()
    sel = select(load_steps([run_a, tmp_path / "b"]), mode="all")
    dups = [s for s in sel.samples if s["target_digest"] == Candidate(variant(2048)).digest]
    assert len(dups) == 1 and dups[0]["gain"] == pytest.approx(1.25) and dups[0]["run"] == str(run_a)
    assert sel.stats["dropped"]["duplicate target"] == 1


def test_balance_and_cap(run_a: Path, tmp_path: Path) -> None:
    soft = RunBuilder(tmp_path / "soft", task=ROOT / "tasks/level1/05_softmax.py")
    soft.step("r0c0", variant(64), speedup=1.1)  # (codes need not fit the task: the rules read verdicts)
    soft.step("r0c1", variant(32), speedup=None, status="compile_error")
    soft.step("r1c0", variant(16), parent="r0c0", speedup=0.9)
    soft.step("r1c1", variant(16, 2), parent="r0c0", speedup=None, status="runtime_error")
    soft.close()
    runs = load_steps([run_a, tmp_path / "soft"])
    plain = select(runs)
    assert plain.stats["per_task"] == {"01_relu": 3, "05_softmax": 1}
    bal = select(runs, balance=True)
    assert bal.stats["per_task"] == {"01_relu": 2, "05_softmax": 1}  # capped at the median count (2)
    w = {s["task"]: s["weight"] for s in bal.samples}
    assert w["05_softmax"] > w["01_relu"]  # 1/4 success vs 3/7
    assert sum(s["weight"] for s in bal.samples) / len(bal.samples) == pytest.approx(1.0, abs=1e-5)
    capped = select(runs, max_per_task=1)
    assert capped.stats["per_task"] == {"01_relu": 1, "05_softmax": 1}
    assert [s["step"] for s in capped.samples if s["task"] == "01_relu"] == ["r1c0"]  # highest gain stays


def test_unlinked_and_pooled_responses(tmp_path: Path) -> None:
    b = RunBuilder(tmp_path / "replayed")
    b.step("r0c0", variant(1024), speedup=1.2, cache=False)  # e.g. a --replay run: responses stay elsewhere
    b.close()
    (run,) = load_steps([tmp_path / "replayed"])
    assert run.steps == [] and run.unlinked == {"response not in any given run's response cache": 1}
    src = RunBuilder(tmp_path / "recorded")
    src.step("r0c0", variant(1024), speedup=1.2)
    src.close()
    runs = load_steps([tmp_path / "replayed", tmp_path / "recorded"])
    assert [len(r.steps) for r in runs] == [1, 1] and not runs[0].unlinked


def test_cli_data_sft_and_rl(run_a: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "d" / "sft.jsonl"
    res = runner.invoke(app, ["data", "sft", str(run_a), "--out", str(out), "--mode", "best", "--top-k", "2"])
    assert res.exit_code == 0, res.output
    assert len(out.read_text().splitlines()) == 2 and out.with_suffix(".md").exists()
    rl = tmp_path / "d" / "rl.jsonl"
    res = runner.invoke(app, ["data", "rl", str(run_a), "--out", str(rl)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in rl.read_text().splitlines()]
    assert len(rows) == 7 and {r["data_source"] for r in rows} == {"kernelsmith/01_relu"}
    assert json.loads(rows[0]["reward_model"]["ground_truth"])["task_source"] == rows[0]["task_source"]
    res = runner.invoke(app, ["data", "sft", str(tmp_path / "nothing"), "--out", str(out)])
    assert res.exit_code == 2 and "no run.db" in res.output
    res = runner.invoke(app, ["data", "sft", str(run_a), "--out", str(out), "--mode", "worst"])
    assert res.exit_code == 2
