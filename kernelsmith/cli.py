"""The `kernelsmith` command line: thin — parse, call the part, print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Evolve faster, verified Triton kernels.")
err = Console(stderr=True)
out = Console()

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_BAD_INPUT = 0, 1, 2


def bad_input(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_BAD_INPUT)


@app.callback()
def _main() -> None:
    """kernelsmith: a referee, an evolutionary workshop and a coach for Triton kernels."""


@app.command("eval")
def eval_command(
    task: Annotated[Path, typer.Argument(help="KernelBench-format task file (class Model, get_inputs, ...)")],
    candidate: Annotated[Path, typer.Argument(help="Candidate file defining class ModelNew")],
    device: Annotated[str, typer.Option(help="cuda, or cpu (Triton interpreter; no timing)")] = "cuda",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a task constant: NAME=VALUE")] = None,
    policy: Annotated[str, typer.Option(help="strict: all compute in Triton; lenient: KernelBench's rule")] = "strict",
    timeout: Annotated[float, typer.Option(help="Seconds for the whole evaluation")] = 300.0,
    trials: Annotated[int, typer.Option(help="Random input sets (plus the task's get_test_inputs)")] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON")] = False,
) -> None:
    """Judge CANDIDATE against TASK: compiled? correct on fresh inputs? how much faster? did it cheat?

    Exit code 0 when correct, 1 when not, 2 for bad input.
    """
    from kernelsmith.candidate import Candidate, CandidateError
    from kernelsmith.referee.evaluation import EvalOptions, evaluate
    from kernelsmith.task import Task, TaskError, parse_overrides

    opts = EvalOptions(device=device, policy=policy, timeout_s=timeout, trials=trials)
    try:
        opts.validate()
        loaded = Task.load(task, parse_overrides(set_), device=device)
        cand = Candidate.from_file(candidate)
    except (TaskError, CandidateError, ValueError) as exc:
        raise bad_input(str(exc)) from None
    verdict = evaluate(loaded, cand, opts)
    if as_json:
        print(json.dumps(verdict.to_dict(), indent=2))
    else:
        print_verdict(verdict, loaded.name)
    raise typer.Exit(EXIT_CORRECT if verdict.correct else EXIT_NOT_CORRECT)


def print_verdict(verdict, name: str) -> None:  # noqa: ANN001 - Verdict, imported lazily
    colour = "green" if verdict.correct else "red"
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_row("task", name)
    table.add_row("status", f"[bold {colour}]{verdict.status.value}[/]")
    if verdict.error:
        table.add_row("why", verdict.error)
    if verdict.speedup is not None:
        lo, hi = verdict.speedup_ci
        table.add_row("speedup", f"{verdict.speedup:.3f}× (95% CI {lo:.3f}–{hi:.3f})")
        table.add_row("time", f"reference {verdict.ref_ms:.4f} ms, candidate {verdict.cand_ms:.4f} ms "
                              f"({verdict.timing.get('method')}, {verdict.timing.get('reps')} reps)")
    elif verdict.correct:
        table.add_row("speedup", "not measured (cpu)")
    if verdict.max_abs_err is not None:
        table.add_row("error", f"max abs {verdict.max_abs_err:.3g}, max rel {verdict.max_rel_err:.3g} "
                               f"over {verdict.trials} input sets")
    if verdict.kernels:
        table.add_row("kernels", ", ".join(f"{k}×{n}" for k, n in verdict.kernels.items()))
    if verdict.ops:
        table.add_row("torch ops", ", ".join(f"{k}×{n}" for k, n in sorted(verdict.ops.items())))
    for g in verdict.guards:
        table.add_row(f"guard ({g.severity.value})", f"{g.name}: {g.message}")
    table.add_row("device", f"{verdict.device}; " + ", ".join(f"{k} {v}" for k, v in verdict.versions.items()))
    out.print(table)
    if not verdict.correct and verdict.log:
        out.rule("candidate log (tail)")
        out.print(verdict.log[-3000:], markup=False, highlight=False)


def main() -> None:  # pragma: no cover
    app()
