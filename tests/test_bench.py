"""`kernelsmith bench` and `kernelsmith compare` through the CLI, on the CPU with the real referee.

A small task tree (two level1 tasks, one level2) with candidates for two of them: 2 evaluations for the eval
bench, 1 for the evolve bench, 1 child process for the torch.compile timer.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelsmith.bench.metrics import by_level
from kernelsmith.bench.runner import metrics_tables
from kernelsmith.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def invoke(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("bench")
    tasks = base / "KernelBench"
    for rel in ("level1/01_relu.py", "level1/04_leaky_relu.py", "level2/02_scale_bias_clamp_sigmoid.py"):
        (tasks / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "tasks" / rel, tasks / rel)
    cands = base / "cands"
    (cands / "level1").mkdir(parents=True)
    shutil.copy(ROOT / "solutions/level1/01_relu.py", cands / "level1/01_relu.py")  # mirrored layout
    shutil.copy(ROOT / "solutions/level2/02_scale_bias_clamp_sigmoid.py", cands / "02_scale_bias_clamp_sigmoid.py")
    return {"base": base, "tasks": tasks, "cands": cands, "out": base / "out"}


@pytest.fixture(scope="module")
def eval_bench(tree: dict[str, Path]):  # noqa: ANN201
    args = ("bench", str(tree["tasks"]), "--levels", "1,2", "--candidates", str(tree["cands"]), "--device", "cpu",
            "--out", str(tree["out"]), "--against-compile", "--timeout", "120")
    result = invoke(*args)
    return args, result


def rows_of(out: Path) -> list[dict]:
    """The rows of results.jsonl (a line cut short by an interruption is not a row)."""
    rows = []
    for line in (out / "results.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def test_eval_bench_results_and_metrics(tree: dict[str, Path], eval_bench) -> None:  # noqa: ANN001
    _, result = eval_bench
    out = tree["out"]
    assert result.exit_code == 0, result.output
    rows = {r["task"]: r for r in rows_of(out)}
    assert set(rows) == {"level1/01_relu.py", "level1/04_leaky_relu.py", "level2/02_scale_bias_clamp_sigmoid.py"}
    assert rows["level1/01_relu.py"]["status"] == "correct"
    assert rows["level2/02_scale_bias_clamp_sigmoid.py"]["status"] == "correct"  # found in the flat layout
    missing = rows["level1/04_leaky_relu.py"]
    assert missing["status"] == "no_candidate" and "counted as not correct" in missing["error"]
    assert "1 task(s) had no candidate" in result.output

    doc = json.loads((out / "metrics.json").read_text())
    m = doc["metrics"]["eager"]
    assert m["overall"]["tasks"] == 3 and m["overall"]["correct"] == 2
    assert m["overall"]["correct_rate"] == pytest.approx(2 / 3)
    assert m["level1"]["correct_rate"] == pytest.approx(0.5) and m["level2"]["correct_rate"] == 1.0
    assert m["overall"]["fast_1"] == 0.0 and m["overall"]["geomean"] is None  # nothing is timed on the CPU
    assert doc["metrics"]["compile"].startswith("not measured")
    assert all(r["compile_error"].startswith("not measured") for r in rows.values())
    assert doc["no_candidate"] == 1

    table = list(csv.DictReader((out / "metrics.csv").open()))
    assert [(r["baseline"], r["group"]) for r in table] == [("eager", "overall"), ("eager", "level1"),
                                                           ("eager", "level2")]
    assert float(table[0]["correct_rate"]) == pytest.approx(2 / 3)
    per_task = list(csv.DictReader((out / "tasks.csv").open()))
    assert {r["task"]: r["status"] for r in per_task}["level1/04_leaky_relu.py"] == "no_candidate"
    assert (out / "report.html").is_file()


def test_resume_skips_finished_tasks_and_redoes_a_cut_line(tree: dict[str, Path], eval_bench) -> None:  # noqa: ANN001
    args, first = eval_bench
    assert first.exit_code == 0
    out = tree["out"]
    again = invoke(*args)
    assert again.exit_code == 0 and "resumed: 3 task(s)" in again.output
    assert len(rows_of(out)) == 3  # nothing appended: nothing redone

    # An interruption: the last row (the no-candidate task, cheap to redo) cut short mid-write.
    lines = (out / "results.jsonl").read_text().splitlines()
    keep = [ln for ln in lines if "04_leaky_relu" not in ln]
    before = {json.loads(ln)["task"]: json.loads(ln)["finished_at"] for ln in keep}
    (out / "results.jsonl").write_text("\n".join(keep) + "\n" + '{"task": "level1/04_leaky_relu.py", "sta')
    third = invoke(*args)
    assert third.exit_code == 0 and "resumed: 2 task(s)" in third.output
    rows = {r["task"]: r for r in rows_of(out)}
    assert rows["level1/04_leaky_relu.py"]["status"] == "no_candidate"
    assert {k: rows[k]["finished_at"] for k in before} == before  # the finished tasks were not redone
    assert json.loads((out / "metrics.json").read_text())["metrics"]["eager"]["overall"]["tasks"] == 3


def test_resume_with_other_settings_is_refused(tree: dict[str, Path], eval_bench) -> None:  # noqa: ANN001
    args, _ = eval_bench
    result = runner.invoke(app, [*args, "--policy", "lenient"])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit)
    assert "other settings" in result.output and "policy" in result.output and str(tree["out"]) in result.output


@pytest.mark.parametrize("extra, expected", [
    (("/nonexistent/kernelbench",), "/nonexistent/kernelbench: no such file or directory"),
    (("{empty}",), "no tasks found"),
    (("{tasks}", "--levels", "1,x"), "--levels '1,x'"),
    (("{tasks}", "--levels", "3"), "no tasks found for levels 3"),
    (("{tasks}", "--set", "no_such_constant=4"), "no_such_constant: no selected task defines"),
    (("{tasks}", "--candidates", "{base}/missing"), "missing: --candidates is not a directory"),
    (("{tasks}", "--backend", "hip"), "--backend 'hip': expected one of triton, cuda"),
])
def test_bad_input_exits_2_naming_the_path(tree: dict[str, Path], extra: tuple[str, ...], expected: str) -> None:
    empty = tree["base"] / "empty"
    empty.mkdir(exist_ok=True)
    args = [a.format(empty=empty, tasks=tree["tasks"], base=tree["base"]) for a in extra]
    if "--candidates" not in args:
        args += ["--candidates", str(tree["cands"])]
    result = runner.invoke(app, ["bench", *args, "--device", "cpu", "--out", str(tree["base"] / "bad-out")])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # no traceback: a clean exit
    assert "Traceback" not in result.output
    assert expected.format(base=tree["base"]) in " ".join(result.output.split())


def test_backend_reaches_the_referee(tree: dict[str, Path]) -> None:
    """`--backend cuda` judges the candidates as CUDA C++: Triton files have no load_inline source to build."""
    out = tree["base"] / "cuda-bench"
    result = runner.invoke(app, ["bench", str(tree["tasks"]), "--candidates", str(tree["cands"]), "--device", "cpu",
                                 "--backend", "cuda", "--out", str(out), "--no-report"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    judged = [r for r in rows if r["status"] != "no_candidate"]
    assert judged and all(r["status"] == "compile_error" and "load_inline" in r["error"] for r in judged), rows
    assert json.loads((out / "bench.json").read_text())["settings"]["backend"] == "cuda"


def test_eval_mode_needs_candidates(tree: dict[str, Path]) -> None:
    result = runner.invoke(app, ["bench", str(tree["tasks"]), "--device", "cpu", "--out", str(tree["base"] / "x")])
    assert result.exit_code == 2 and "--mode eval needs --candidates" in result.output


def test_compare_reports_metric_and_task_deltas(tree: dict[str, Path], eval_bench) -> None:  # noqa: ANN001
    assert eval_bench[1].exit_code == 0
    a, b = tree["out"], tree["base"] / "out-b"
    shutil.copytree(a, b)
    (b / "metrics.json").unlink()  # B recomputes its metrics from results.jsonl (a bench that never finished)
    rows = rows_of(b)
    for r in rows:
        if r["task"] == "level1/01_relu.py":
            r.update(status="incorrect", error="max rel err 0.5")
    (b / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    result = invoke("compare", str(a), str(b), "--json")
    assert result.exit_code == 0
    cmp = json.loads(result.output)
    overall = cmp["metrics"]["eager"]["overall"]
    assert overall["correct_rate"]["a"] == pytest.approx(2 / 3) and overall["correct_rate"]["b"] == pytest.approx(1 / 3)
    assert overall["correct_rate"]["delta"] == pytest.approx(-1 / 3)
    assert cmp["metrics"]["eager"]["level1"]["correct"]["delta"] == -1
    by_task = {t["task"]: t for t in cmp["tasks"]}
    assert by_task["level1/01_relu.py"]["change"] == "broke"
    assert by_task["level2/02_scale_bias_clamp_sigmoid.py"]["change"] == "same"
    assert cmp["summary"] == {"same": 2, "fixed": 0, "broke": 1, "changed": 0}
    assert cmp["metrics"]["compile"]["comparable"] is False

    table = invoke("compare", str(a), str(b))
    assert table.exit_code == 0
    text = table.output
    assert "correct_rate" in text and "-33.3 pp" in text and "broke" not in text.split("tasks")[0]
    assert "1 broke" in text and "level1/01_relu.py" in text.replace("\n", "")

    missing = runner.invoke(app, ["compare", str(a), str(tree["base"] / "nope")])
    assert missing.exit_code == 2 and "nope: no such bench directory" in missing.output


def test_evolve_bench_makes_a_run_dir_per_task_and_links_its_report(tree: dict[str, Path]) -> None:
    out = tree["base"] / "evolve-out"
    result = invoke("bench", str(tree["tasks"] / "level1" / "01_relu.py"), "--mode", "evolve", "--device", "cpu",
                    "--rounds", "1", "--population", "1", "--out", str(out))
    assert result.exit_code == 0, result.output
    (row,) = rows_of(out)
    assert row["task"] == "level1/01_relu.py" and row["run_dir"] == "runs/level1/01_relu"
    run_dir = out / row["run_dir"]
    assert (run_dir / "run.db").is_file() and (run_dir / "summary.json").is_file()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert row["status"] == summary["best_status"] == "correct" and row["best_id"] == summary["best_id"]
    page = (out / "report.html").read_text()
    assert 'href="runs/level1/01_relu/report.html"' in page and (run_dir / "report.html").is_file()
    again = invoke("bench", str(tree["tasks"] / "level1" / "01_relu.py"), "--mode", "evolve", "--device", "cpu",
                   "--rounds", "1", "--population", "1", "--out", str(out))
    assert again.exit_code == 0 and "resumed: 1 task(s)" in again.output and len(rows_of(out)) == 1


def test_compile_timer_child_and_metrics_against_compile() -> None:
    from kernelsmith.bench.compile_timer import time_compile
    from kernelsmith.task import Task

    task = Task.load(ROOT / "tasks/level1/01_relu.py", device="cpu")
    r = time_compile(task.source, str(task.path), "cpu", backend="eager")  # the plumbing; the bench times cuda only
    assert r["error"] == "" and r["eager_ms"] > 0 and r["compile_ms"] > 0
    assert r["compile_ratio"] == pytest.approx(r["eager_ms"] / r["compile_ms"])
    broken = time_compile("raise RuntimeError('boom')\n", "t.py", "cpu", backend="eager")
    assert "boom" in broken["error"] and "compile_ms" not in broken

    rows = [
        {"task": "a", "level": "level1", "status": "correct", "speedup": 3.0, "compile_ratio": 1.5,
         "speedup_vs_compile": 2.0},
        {"task": "b", "level": "level1", "status": "incorrect", "compile_ratio": 2.0},  # measured baseline, failed
        {"task": "c", "level": "level2", "status": "correct", "speedup": 1.2, "compile_error": "timeout"},  # unmeasured
    ]
    t = by_level(rows, "speedup_vs_compile", measured="compile_ratio")
    assert t["overall"]["tasks"] == 2 and t["overall"]["fast_1.5"] == pytest.approx(0.5)
    assert "level2" not in t and t["overall"]["geomean"] == pytest.approx(2.0)
    tables = metrics_tables(rows, None, "cuda")
    assert tables["compile"]["overall"]["amsr"] == pytest.approx(1.0) and tables["eager"]["overall"]["tasks"] == 3
    assert metrics_tables(rows, None, "cpu")["compile"].startswith("not measured")
