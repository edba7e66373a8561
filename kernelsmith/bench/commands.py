"""`kernelsmith bench`, `compare` and `report`: registered on the main typer app by `register`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

err = Console(stderr=True)
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _bad(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", markup=True, highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_BAD_INPUT)


class _EvolveDetail:
    """Shows the workshop's round/best of the task being evolved in the bench's progress line."""

    def __init__(self) -> None:
        self.progress: Any = None

    def __call__(self, progress: Any) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def watch() -> Any:
            self.progress = progress
            try:
                yield
            finally:
                self.progress = None

        return watch()

    def text(self) -> str:
        p = self.progress
        if p is None:
            return ""
        best = f"{p.best_speedup:.3f}×" if p.best_speedup else (p.best_id or "—")
        return f"round {p.round}/{p.rounds}, {p.correct}/{p.evaluated} correct, best {best}"


def bench_command(
    paths: Annotated[list[Path], typer.Argument(help="Task folders (ours: tasks/; KernelBench's: its folder of "
                                                     "level1..level3) or task files")],
    levels: Annotated[str | None, typer.Option(help="Levels to run, e.g. 1,2 (default: all found)")] = None,
    mode: Annotated[str, typer.Option(help="eval: judge the given candidates; evolve: evolve each task")] = "eval",
    candidates: Annotated[Path | None, typer.Option(
        help="Folder of ModelNew files named like the tasks (levelN/FILE.py, like solutions/); in evolve mode "
             "they are the seed programs")] = None,
    out: Annotated[Path, typer.Option(help="Results folder; rerunning the same command resumes it")] = Path(
        "runs/bench"),
    device: Annotated[str, typer.Option(help="auto (cuda when torch sees a GPU, else cpu), cuda, or cpu "
                                             "(Triton interpreter; no timing)")] = "auto",
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Override a task constant, NAME=VALUE (applied to the tasks that define it)")] = None,
    against_compile: Annotated[bool, typer.Option(
        "--against-compile", help="Also time torch.compile of each reference (cuda only) and report the "
                                  "metrics against it")] = False,
    backend: Annotated[str, typer.Option(help="triton, or cuda (CUDA C++ through load_inline)")] = "triton",
    policy: Annotated[str, typer.Option(help="strict or lenient (see kernelsmith eval)")] = "strict",
    precision: Annotated[str, typer.Option(
        help="fp32 matmul/conv precision of generated code and of the eager and torch.compile baselines: ieee, "
             "tf32x3 (3 tf32 passes, about fp32's accuracy) or tf32 (1 pass)")] = "tf32x3",
    numerics: Annotated[str, typer.Option(
        help="tolerance (KernelBench's atol/rtol) or fp32 (also refuse reduced-precision arithmetic on fp32 "
             "outputs, judged against the task run in float64)")] = "tolerance",
    timeout: Annotated[float, typer.Option(help="Seconds per evaluation")] = 300.0,
    trials: Annotated[int, typer.Option(help="Random input sets per evaluation (eval mode)")] = 5,
    rounds: Annotated[int | None, typer.Option(help="Evolve mode: rounds per task")] = None,
    population: Annotated[int | None, typer.Option(help="Evolve mode: children per round")] = None,
    model: Annotated[str | None, typer.Option(help="Evolve mode: model at the OpenAI-compatible endpoint")] = None,
    base_url: Annotated[str | None, typer.Option(help="Evolve mode: endpoint URL")] = None,
    api_key_env: Annotated[str, typer.Option(help="Evolve mode: variable holding the API key")] = "OPENAI_API_KEY",
    proposer: Annotated[str | None, typer.Option(help="Evolve mode: auto, llm, offline, mixed")] = None,
    config: Annotated[Path | None, typer.Option(help="Evolve mode: YAML run config (flags override it)")] = None,
    report: Annotated[bool, typer.Option(help="Write OUT/report.html (and each run's report) at the end")] = True,
) -> None:
    """Run a set of KernelBench-format tasks: evaluate given candidates or evolve each task; write the metrics.

    Per level and overall: correctness rate, fast_p (p = 0, 0.5, 0.8, 1, 1.5, 2), AMSR and the geometric-mean
    speedup, against the eager reference and (with --against-compile, on cuda) torch.compile. Results go to
    OUT/results.jsonl as each task finishes, so an interrupted bench resumes where it stopped. Exit code 0
    when the bench ran (whatever the candidates did), 2 for bad input, 130 when interrupted.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from kernelsmith.bench.runner import BenchSettings, run_bench
    from kernelsmith.bench.tasks import BenchInputError, discover, parse_levels
    from kernelsmith.cli import resolve_device, say_device
    from kernelsmith.task import TaskError, parse_overrides

    try:
        device, device_note = resolve_device(device)
    except ValueError as exc:
        raise _bad(str(exc)) from None
    try:
        overrides = parse_overrides(set_)
        settings = BenchSettings(mode=mode, device=device, backend=backend, policy=policy, overrides=overrides,
                                 precision=precision, numerics=numerics,
                                 candidates=str(candidates) if candidates else None, trials=trials,
                                 timeout_s=timeout, against_compile=against_compile, rounds=rounds,
                                 population=population, model=model, base_url=base_url, api_key_env=api_key_env,
                                 proposer=proposer, config=str(config) if config else None)
        settings.validate()
        tasks = discover(paths, parse_levels(levels), overrides, device)
    except (BenchInputError, TaskError) as exc:
        raise _bad(str(exc)) from None
    say_device(device_note)
    if against_compile and device == "cpu":
        err.print("[yellow]--against-compile:[/] torch.compile is timed on cuda only; on cpu it is reported as "
                  "not measured", highlight=False)

    detail = _EvolveDetail()
    state = {"done": 0, "correct": 0, "skipped": 0, "no_candidate": 0}

    class _Detail(TextColumn):
        def render(self, task: Any) -> Any:  # noqa: ANN401
            from rich.text import Text

            return Text(detail.text(), style="dim")

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("[green]{task.fields[correct]} correct"), TimeElapsedColumn(), _Detail(""),
                        console=err, transient=False)
    bar = progress.add_task("bench", total=len(tasks), correct=0)

    def on_start(t: Any) -> None:
        progress.update(bar, description=t.key)

    def on_done(t: Any, row: dict[str, Any], skipped: bool) -> None:
        state["done"] += 1
        state["correct"] += row.get("status") == "correct"
        state["skipped"] += skipped
        if row.get("status") == "no_candidate":
            state["no_candidate"] += 1
        progress.update(bar, advance=1, correct=state["correct"])
        if not skipped:
            sp = row.get("speedup")
            progress.console.print(f"{t.key}: {row.get('status')}" + (f", {sp:.3f}×" if sp else "")
                                   + (f" — {row['error']}" if row.get("error") and row.get("status") != "correct"
                                      else ""), highlight=False, markup=False)

    try:
        with progress:
            run_bench(tasks, settings, out, on_start=on_start, on_done=on_done,
                             display=detail if mode == "evolve" else None)
    except BenchInputError as exc:
        raise _bad(str(exc)) from None
    except KeyboardInterrupt:
        err.print(f"\ninterrupted after {state['done']} of {len(tasks)} tasks; finished ones are in "
                  f"{out / 'results.jsonl'}: run the same command again to resume", highlight=False)
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if state["skipped"]:
        err.print(f"resumed: {state['skipped']} task(s) already finished in {out} were not redone", highlight=False)
    if state["no_candidate"]:
        err.print(f"[yellow]{state['no_candidate']} task(s) had no candidate under {candidates}: counted as not "
                  "correct[/]", highlight=False)
    _print_metrics(out)
    if report:
        from kernelsmith.bench.report import write_report

        path = write_report(out)
        err.print(f"report: {path}", highlight=False)


def _print_metrics(out: Path) -> None:
    from rich.table import Table

    from kernelsmith.bench.runner import load_bench, precision_label

    doc = load_bench(out)
    console = Console()
    settings = doc.get("settings") or {}
    console.print(precision_label(settings.get("precision"), settings.get("numerics")), highlight=False)
    for baseline, title in (("eager", "against eager"), ("compile", "against torch.compile")):
        t = doc["metrics"].get(baseline)
        if not isinstance(t, dict):
            console.print(f"{title}: {t}", highlight=False)
            continue
        table = Table(title=f"{out}: {title}")
        names = ["tasks", "correct_rate", "fast_0", "fast_1", "fast_1.5", "fast_2", "amsr", "geomean"]
        table.add_column("group")
        for n in names:
            table.add_column(n, justify="right")
        for group, m in t.items():
            table.add_row(group, *(_fmt(n, m.get(n)) for n in names))
        console.print(table)
    console.print(f"written: {out / 'metrics.json'}, {out / 'metrics.csv'}, {out / 'tasks.csv'}", highlight=False)


def _fmt(name: str, v: Any) -> str:
    if v is None:
        return "—"
    if name in ("tasks", "correct", "timed"):
        return str(v)
    if name == "geomean":
        return f"{v:.3f}×"
    if name == "amsr":
        return f"{v:.3f}"
    return f"{100 * v:.1f}%"


def compare_command(
    a: Annotated[Path, typer.Argument(help="A bench OUT dir (the baseline)")],
    b: Annotated[Path, typer.Argument(help="Another bench OUT dir")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON")] = False,
) -> None:
    """Compare two bench runs: each metric (per level and overall) and each task, with the deltas B − A."""
    from kernelsmith.bench.compare import compare, print_comparison
    from kernelsmith.bench.tasks import BenchInputError

    try:
        result = compare(a, b)
    except BenchInputError as exc:
        raise _bad(str(exc)) from None
    if as_json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print_comparison(result, Console())


def report_command(
    path: Annotated[Path, typer.Argument(help="A run dir (kernelsmith evolve --run-dir) or a bench OUT dir")],
    out: Annotated[Path | None, typer.Option(help="HTML file to write (default: PATH/report.html)")] = None,
) -> None:
    """Write one self-contained HTML report (no network) for a run or a bench."""
    from kernelsmith.bench.report import write_report
    from kernelsmith.bench.tasks import BenchInputError

    try:
        if out is not None and out.parent and not out.parent.exists():
            raise BenchInputError(f"{out.parent}: folder for --out does not exist")
        written = write_report(path, out)
    except BenchInputError as exc:
        raise _bad(str(exc)) from None
    Console().print(f"report: {written}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add this part's commands to `app`."""
    app.command("bench")(bench_command)
    app.command("compare")(compare_command)
    app.command("report")(report_command)
