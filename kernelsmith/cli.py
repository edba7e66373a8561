"""The `kernelsmith` command line: thin — parse, call the part, print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kernelsmith.settings import check_device

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
    backend: Annotated[str, typer.Option(help="triton, or cuda (CUDA C++ through load_inline)")] = "triton",
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON")] = False,
) -> None:
    """Judge CANDIDATE against TASK: compiled? correct on fresh inputs? how much faster? did it cheat?

    Exit code 0 when correct, 1 when not, 2 for bad input.
    """
    from kernelsmith.candidate import Candidate, CandidateError
    from kernelsmith.referee.pool import LocalPool, RequestError
    from kernelsmith.referee.verdict import Verdict
    from kernelsmith.settings import EvalRequest, EvalSettings
    from kernelsmith.task import Task, TaskError, parse_overrides

    try:
        settings = EvalSettings(device=device, policy=policy, timeout_s=timeout, trials=trials, backend=backend)
        loaded = Task.load(task, parse_overrides(set_), device=device)
        cand = Candidate.from_file(candidate)
        pool = LocalPool(device, slots_per_gpu=1, cpu_slots=1, warm=0)  # the one way in, as every evaluation
    except (TaskError, CandidateError, RequestError, ValueError) as exc:
        raise bad_input(str(exc)) from None
    result = pool.run(EvalRequest(task_source=loaded.source, task_name=loaded.name, candidate_source=cand.source,
                                  options=settings))
    if result.get("status") == "bad_request":
        raise bad_input(str(result.get("error")))
    verdict = Verdict.from_dict(result)
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


@app.command("evolve")
def evolve_command(
    task: Annotated[Path | None, typer.Argument(help="KernelBench-format task file")] = None,
    rounds: Annotated[int | None, typer.Option(help="Rounds of propose → evaluate → archive (default 40)")] = None,
    population: Annotated[int | None, typer.Option(help="Children proposed per round")] = None,
    model: Annotated[str | None, typer.Option(help="Model name at the OpenAI-compatible endpoint")] = None,
    proposer: Annotated[str | None, typer.Option(
        help="auto (model if given, else offline), llm, offline (no model: seed + tuner), mixed")] = None,
    base_url: Annotated[str | None, typer.Option(help="Endpoint, e.g. http://localhost:8000/v1 (vLLM)")] = None,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key")] = "OPENAI_API_KEY",
    run_dir: Annotated[Path | None, typer.Option(help="Where the run database and results go")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the run in --run-dir")] = False,
    replay: Annotated[Path | None, typer.Option(help="Rerun a recorded run from its responses, no network")] = None,
    device: Annotated[str | None, typer.Option(help="cuda, or cpu (Triton interpreter)")] = None,
    backend: Annotated[str | None, typer.Option(help="triton, or cuda (CUDA C++ through load_inline)")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with any setting; flags override it")] = None,
    seed_program: Annotated[Path | None, typer.Option(help="A first candidate to start from")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a task constant: NAME=VALUE")] = None,
) -> None:
    """Evolve a faster, verified Triton kernel for TASK."""
    from kernelsmith.task import TaskError, parse_overrides
    from kernelsmith.workshop.config import ConfigError, RunConfig, load_config, resume_config
    from kernelsmith.workshop.llm import LLMError
    from kernelsmith.workshop.proposers import ProposerUnavailable
    from kernelsmith.workshop.run import evolve

    flags: dict = {"task": task, "rounds": rounds, "population": population, "device": device, "run_dir": run_dir,
                   "proposer": proposer, "backend": backend}
    try:
        if model:
            flags["models"] = [{"name": model, "base_url": base_url, "api_key_env": api_key_env}]
        if set_:
            flags["overrides"] = parse_overrides(set_)
        changed: dict = {}
        if resume:  # the run's own settings; a flag may only change what a resume may change
            where = run_dir or (load_config(config).run_dir if config else RunConfig().run_dir)
            cfg, changed = resume_config(where, config, {k: v for k, v in flags.items() if k != "run_dir"})
            cfg.run_dir = Path(where)
        else:
            cfg = load_config(config, flags)
        summary = evolve(cfg, resume=resume, replay=replay, seed_program=seed_program, display=live_display,
                         changed=changed)
    except (ConfigError, TaskError, ProposerUnavailable, LLMError, ValueError) as exc:
        raise bad_input(str(exc)) from None
    out.print(f"\n[bold]best[/]: {summary['best_id']} ({summary['best_status']}, speedup {summary['best_speedup']}) "
              f"→ {cfg.run_dir / 'best.py'}", highlight=False)
    if summary["stopped"]:
        out.print(f"stopped early: {summary['stopped']}", highlight=False)


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Address to bind; beyond localhost a token is required")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8470,
    device: Annotated[str, typer.Option(help="cuda, or cpu (Triton interpreter; no timing)")] = "cuda",
    gpus: Annotated[str | None, typer.Option(help="GPU indices to use, e.g. 0,1 (default: all visible)")] = None,
    slots_per_gpu: Annotated[int, typer.Option(help="Evaluations at once per GPU (timing still runs alone)")] = 2,
    cpu_slots: Annotated[int, typer.Option(help="Evaluations at once with --device cpu")] = 2,
    db: Annotated[Path, typer.Option(help="SQLite file holding accepted jobs (survives restarts)")] = Path(
        "kernelsmith-jobs.db"),
    token_env: Annotated[str, typer.Option(help="Environment variable holding the bearer token")] = "KERNELSMITH_TOKEN",
    backend: Annotated[str, typer.Option(help="local (this machine's GPUs) or ray (a Ray cluster)")] = "local",
    ray_address: Annotated[str | None, typer.Option(help="Ray cluster address (default: start a local one)")] = None,
    max_request_mb: Annotated[float, typer.Option(help="Largest request body accepted")] = 8.0,
) -> None:
    """Serve the referee over HTTP: submit evaluations, wait for verdicts (OpenAPI schema at /docs)."""
    import os

    try:
        check_device(device, "--device")
    except ValueError as exc:
        raise bad_input(str(exc)) from None
    if backend not in ("local", "ray"):
        raise bad_input(f"--backend {backend!r}: expected local or ray")
    token = os.environ.get(token_env) or None
    if host not in LOOPBACK and token is None:
        raise bad_input(f"--host {host} is reachable beyond this machine: set a bearer token in ${token_env}")
    try:
        gpu_list = [int(g) for g in gpus.split(",") if g.strip()] if gpus else None
    except ValueError:
        raise bad_input(f"--gpus {gpus!r}: expected comma-separated integers, e.g. 0,1") from None
    import uvicorn

    from kernelsmith.referee.jobs import JobStore
    from kernelsmith.referee.pool import LocalPool, RequestError
    from kernelsmith.referee.service import create_app

    try:
        if backend == "ray":
            from kernelsmith.referee.ray_pool import RayPool

            pool = RayPool(device, address=ray_address, slots_per_actor=slots_per_gpu if device == "cuda" else 1)
        else:
            pool = LocalPool(device, gpus=gpu_list, slots_per_gpu=slots_per_gpu, cpu_slots=cpu_slots)
        store = JobStore(db)
    except (RequestError, RuntimeError, OSError) as exc:
        raise bad_input(str(exc)) from None
    application = create_app(store, pool, token=token, device=device, max_request_bytes=int(max_request_mb * 2**20))
    err.print(f"kernelsmith referee on http://{host}:{port} ({backend}, {device}, {pool.capacity} slots, "
              f"jobs in {db})", highlight=False)
    uvicorn.run(application, host=host, port=port, log_level="warning")


def live_display(progress):  # noqa: ANN001, ANN201 - Progress -> context manager
    """A live panel: round k/N, best speedup, correct rate, tokens and cost, work in flight."""
    from rich.live import Live

    def render() -> Table:
        p = progress
        t = Table(show_header=False, box=None, pad_edge=False)
        best = f"{p.best_speedup:.3f}×" if p.best_speedup else ("correct (cpu)" if p.best_id else "—")
        rate = f"{p.correct}/{p.evaluated}" if p.evaluated else "—"
        t.add_row("round", f"{p.round}/{p.rounds}")
        t.add_row("best", f"{best} ({p.best_id or 'none yet'})")
        t.add_row("correct", rate)
        t.add_row("proposals", f"{p.proposed} ({p.duplicates} duplicates, {p.unusable} unusable)")
        t.add_row("in flight", f"{p.in_flight_proposals} proposals, {p.in_flight_evaluations} evaluations")
        t.add_row("tokens", f"{p.tokens} (${p.cost_usd:.4f})")
        for e in p.events[-3:]:
            t.add_row("", e)
        return t

    return Live(get_renderable=render, console=err, refresh_per_second=2, transient=False)


def main() -> None:  # pragma: no cover
    app()


def _register_parts() -> None:
    """Commands owned by the other parts, each defined beside the code it drives."""
    from kernelsmith.bench.commands import register as bench_commands
    from kernelsmith.coach.commands import register as coach_commands

    bench_commands(app)
    coach_commands(app)


_register_parts()


if __name__ == "__main__":  # python -m kernelsmith.cli
    main()
