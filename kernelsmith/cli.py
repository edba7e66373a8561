"""The `kernelsmith` command line: thin — parse, call the part, print.

Every bad input ends the same way: exit 2 and one line on stderr naming the file (or flag) and the problem, and
under `--json` the same as a JSON object on stdout (`{"error": ..., "file": ..., "kind": ...}`); never a
traceback. A task that fails on its own (its inputs, its reference) is bad input too, never a candidate's status.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelsmith.settings import check_device

# The packages of pyproject's extras, by extra: a command that needs one says which extra to install.
EXTRA_OF = {"fastapi": "service", "uvicorn": "service", "ray": "service", "trl": "coach", "transformers": "coach",
            "peft": "coach", "datasets": "coach", "accelerate": "coach"}
try:  # click's usage errors: Typer's own copy of click (recent Typer vendors it and needs no click)...
    from typer import TyperException as _ClickError
except ImportError:  # ...or click itself, which older Typer depends on
    from click import ClickException as _ClickError


class _App(typer.Typer):
    """Typer, with click's own usage errors (`--trials abc`, an unknown flag) as one line like any bad input,
    instead of a boxed usage panel."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("standalone_mode", True) is False:
            return super().__call__(*args, **kwargs)
        kwargs.setdefault("prog_name", "kernelsmith")  # also under `python -m kernelsmith.cli`
        try:
            code = super().__call__(*args, standalone_mode=False, **kwargs)
        except typer.Abort:
            sys.exit(EXIT_INTERRUPTED)
        except ModuleNotFoundError as exc:  # an extra's package (scripts/setup.sh installs none by default)
            extra = EXTRA_OF.get(str(exc.name).split(".")[0])
            if extra is None:
                raise
            report_error(f"this command needs the optional package {exc.name!r}: bash scripts/setup.sh {extra} "
                         f"(or pip install 'kernelsmith[{extra}]')", kind="missing_extra",
                         as_json="--json" in sys.argv[1:])
            sys.exit(EXIT_BAD_INPUT)
        except _ClickError as exc:
            where = getattr(exc, "ctx", None)
            if type(exc).__name__ == "NoArgsIsHelpError":  # `kernelsmith` alone: the help, as before
                print(where.get_help() if where is not None else exc.format_message())
                sys.exit(getattr(exc, "exit_code", EXIT_BAD_INPUT))
            see = f" (see: {where.command_path} --help)" if where is not None else ""
            report_error(exc.format_message() + see, kind="usage", as_json="--json" in sys.argv[1:])
            sys.exit(getattr(exc, "exit_code", EXIT_BAD_INPUT))
        sys.exit(code if isinstance(code, int) else 0)


app = _App(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
           help="Evolve faster, verified Triton kernels.")
err = Console(stderr=True)
out = Console()

EXIT_CORRECT, EXIT_NOT_CORRECT, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
DEVICES_ASKED = ("auto", "cuda", "cpu")
# EvalSettings' names for the flags of `kernelsmith eval`: an error names the flag the user typed
EVAL_FLAGS = {"timeout_s": "--timeout", "trials": "--trials", "policy": "--policy", "backend": "--backend",
              "device": "--device", "precision": "--precision", "numerics": "--numerics"}


def report_error(message: str, *, file: str | Path | None = None, kind: str = "bad_input", as_json: bool = False,
                 hint: str = "", **extra: Any) -> None:
    """One line on stderr ("error: ..."); under --json, also `{"error", "file", "kind"[, "hint"]}` on stdout."""
    line = " ".join(message.split())
    hint = " ".join(hint.split())
    err.print(f"[bold red]error:[/] {escape(line)}" + (f"; hint: {escape(hint)}" if hint else ""), highlight=False,
              soft_wrap=True)
    if as_json:
        obj: dict[str, Any] = {"error": line, "file": str(file) if file is not None else None, "kind": kind}
        if hint:
            obj["hint"] = hint
        print(json.dumps({**obj, **extra}))


def bad_input(message: str, *, file: str | Path | None = None, kind: str = "bad_input", as_json: bool = False,
              hint: str = "", **extra: Any) -> typer.Exit:
    """Report bad input (`report_error`) and return the exit to raise: code 2."""
    report_error(message, file=file, kind=kind, as_json=as_json, hint=hint, **extra)
    return typer.Exit(EXIT_BAD_INPUT)


def input_error(exc: Exception, as_json: bool = False, kind: str = "bad_input") -> typer.Exit:
    """Bad input from an exception: a `SourceError` (task, candidate, config) carries its file and kind."""
    return bad_input(str(exc), file=getattr(exc, "file", None), kind=getattr(exc, "kind", None) or kind,
                     as_json=as_json)


def resolve_device(device: str | None) -> tuple[str, str]:
    """(device, note): `auto` (or no choice) is cuda when torch sees a GPU, else cpu, with a note saying which
    (printed once the inputs are known good: `say_device`); an explicit device has no note. ValueError for a
    device that is none of auto, cuda, cpu."""
    if device not in (None, *DEVICES_ASKED):
        raise ValueError(f"--device {device!r}: expected auto, cuda or cpu")
    if device not in (None, "auto"):
        return check_device(device, "--device") or device, ""
    import torch

    chosen = "cuda" if torch.cuda.is_available() else "cpu"
    why = f"{torch.cuda.device_count()} GPU(s) visible" if chosen == "cuda" else "torch sees no GPU: Triton's " \
          "interpreter, no timing"
    return chosen, f"device: {chosen} ({why}; --device to choose)"


def say_device(note: str) -> None:
    if note:
        err.print(note, highlight=False, soft_wrap=True)


def task_failure(task: Any, verdict: dict[str, Any], timeout_s: float | None = None) -> tuple[str, str]:
    """(message, hint) for a verdict that the task's own failure ended (`Verdict.fault == "task"`)."""
    kind = verdict.get("fault_kind", "")
    sizes = task.size_constants() if task is not None else {}
    listed = ", ".join(f"{k}={v}" for k, v in sizes.items())
    biggest = max(sizes, key=lambda k: sizes[k]) if sizes else ""
    smaller = f"--set {biggest}={max(1, sizes[biggest] // 2)}" if biggest else "--set NAME=smaller"
    hints = {
        "memory": f"the reference needs too much memory at these sizes: try smaller ones, e.g. {smaller}"
                  + (f" (size constants: {listed})" if listed else ""),
        "timeout": "the reference is too slow at these sizes: try a longer timeout"
                   + (f" (it was {timeout_s:g} s)" if timeout_s else "") + f" or smaller sizes, e.g. {smaller}",
        "inputs": "get_inputs() must return the same inputs for the same seed (the referee seeds torch, numpy "
                  "and random): no clock, no os.urandom, no state kept between calls",
    }
    name = getattr(task, "path", None) or "task"
    why = str(verdict.get("error") or verdict.get("status")).removeprefix("the task's reference failed: ")
    message = f"{name}: the task failed, not the candidate: {why}"
    return message, hints.get(kind, "check the task's Model, get_inputs() and get_init_inputs() on their own")


@app.callback()
def _main() -> None:
    """kernelsmith: a referee, an evolutionary workshop and a coach for Triton kernels."""


@app.command("eval")
def eval_command(
    task: Annotated[Path, typer.Argument(help="KernelBench-format task file (class Model, get_inputs, ...)")],
    candidate: Annotated[Path, typer.Argument(help="Candidate file defining class ModelNew")],
    device: Annotated[str, typer.Option(help="auto (cuda when torch sees a GPU, else cpu), cuda, or cpu "
                                             "(Triton interpreter; no timing)")] = "auto",
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a task constant: NAME=VALUE")] = None,
    policy: Annotated[str, typer.Option(help="strict: all compute in Triton; lenient: KernelBench's rule")] = "strict",
    timeout: Annotated[float, typer.Option(help="Seconds for the whole evaluation (0 < s <= 86400)")] = 300.0,
    trials: Annotated[int, typer.Option(help="Random input sets, 1-100 (plus the task's get_test_inputs)")] = 5,
    backend: Annotated[str, typer.Option(help="triton, or cuda (CUDA C++ through load_inline)")] = "triton",
    precision: Annotated[str, typer.Option(help="fp32 matmul/conv precision of the reference timed against: "
                                                "ieee, tf32x3 (fp32 in 3 tf32 passes) or tf32")] = "tf32x3",
    numerics: Annotated[str, typer.Option(help="tolerance (KernelBench's atol/rtol) or fp32 (also refuse "
                                               "reduced-precision arithmetic, judged against float64)")] = "tolerance",
    as_json: Annotated[bool, typer.Option("--json", help="Print the verdict (or the error) as JSON")] = False,
) -> None:
    """Judge CANDIDATE against TASK: compiled? correct on fresh inputs? how much faster? did it cheat?

    Exit code 0 when correct, 1 when not, 2 for bad input (the task's own failure included).
    """
    from kernelsmith.candidate import Candidate, CandidateError
    from kernelsmith.referee.pool import LocalPool, RequestError
    from kernelsmith.referee.verdict import Verdict
    from kernelsmith.settings import EvalRequest, EvalSettings, SettingsError, describe
    from kernelsmith.task import Task, TaskError, parse_overrides

    try:
        chosen, device_note = resolve_device(device)
        settings = EvalSettings(device=chosen, policy=policy, timeout_s=timeout, trials=trials, backend=backend,
                                precision=precision, numerics=numerics)
    except SettingsError as exc:
        message = describe(exc.cause, model=EvalSettings, names=EVAL_FLAGS) if exc.cause else str(exc)
        raise bad_input(message, kind="bad_option", as_json=as_json) from None
    except ValueError as exc:
        raise bad_input(str(exc), kind="bad_option", as_json=as_json) from None
    try:
        loaded = Task.load(task, parse_overrides(set_), device=chosen)
        cand = Candidate.from_file(candidate)
    except (TaskError, CandidateError) as exc:
        raise input_error(exc, as_json) from None
    try:
        pool = LocalPool(chosen, slots_per_gpu=1, cpu_slots=1, warm=0)  # the one way in, as every evaluation
    except (RequestError, ValueError) as exc:
        raise bad_input(str(exc), kind="bad_option", as_json=as_json) from None
    say_device(device_note)
    result = pool.run(EvalRequest(task_source=loaded.source, task_name=loaded.name, candidate_source=cand.source,
                                  options=settings))
    if result.get("status") == "bad_request":
        raise bad_input(str(result.get("error")), kind="bad_request", as_json=as_json)
    verdict = Verdict.from_dict(result)
    if verdict.task_fault:
        message, hint = task_failure(loaded, verdict.to_dict(), timeout)
        raise bad_input(message, file=task, kind="task_failed", as_json=as_json, hint=hint,
                        verdict=verdict.to_dict())
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
    if verdict.precision:
        table.add_row("precision", f"{verdict.precision}, numerics {verdict.numerics}" + (
            f" (error vs float64 {verdict.fp64_error['candidate']:.2g}, fp32 reference's "
            f"{verdict.fp64_error['reference']:.2g})" if verdict.fp64_error else ""))
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
    device: Annotated[str | None, typer.Option(
        help="auto (cuda when torch sees a GPU, else cpu; the default unless --config sets one), cuda, or cpu "
             "(Triton interpreter)")] = None,
    backend: Annotated[str | None, typer.Option(help="triton, or cuda (CUDA C++ through load_inline)")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with any setting; flags override it")] = None,
    seed_program: Annotated[Path | None, typer.Option(help="A first candidate to start from")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a task constant: NAME=VALUE")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary (or the error) as JSON")] = False,
) -> None:
    """Evolve a faster, verified Triton kernel for TASK.

    Exit code 0 when a correct program was found, 1 when none was, 2 for bad input (the task's own failure
    included), 130 when interrupted (it says how to resume).
    """
    from kernelsmith.candidate import Candidate, CandidateError
    from kernelsmith.task import TaskError, parse_overrides
    from kernelsmith.workshop.config import ConfigError, RunConfig, load_config, resume_config
    from kernelsmith.workshop.llm import LLMError
    from kernelsmith.workshop.proposers import ProposerUnavailable
    from kernelsmith.workshop.run import evolve

    flags: dict = {"task": task, "rounds": rounds, "population": population, "device": device, "run_dir": run_dir,
                   "proposer": proposer, "backend": backend}
    cfg: RunConfig | None = None
    device_note = ""
    try:
        if device is not None:
            flags["device"], device_note = resolve_device(device)
        if model:
            flags["models"] = [{"name": model, "base_url": base_url, "api_key_env": api_key_env}]
        if set_:
            flags["overrides"] = parse_overrides(set_)
        if seed_program is not None:
            Candidate.from_file(seed_program)  # read now: a bad file must not leave a half-made run dir behind
        changed: dict = {}
        if resume:  # the run's own settings; a flag may only change what a resume may change
            where = run_dir or (load_config(config).run_dir if config else RunConfig().run_dir)
            cfg, changed = resume_config(where, config, {k: v for k, v in flags.items() if k != "run_dir"})
            cfg.run_dir = Path(where)
        else:
            cfg = load_config(config, flags)
            if "device" not in cfg.model_fields_set:  # neither a flag nor the config chose: what this machine has
                chosen, device_note = resolve_device(None)
                cfg = cfg.model_copy(update={"device": chosen})
        if not resume and replay is None and not (Path(cfg.run_dir) / "run.db").exists():
            check_task(cfg, as_json, device_note)
            device_note = ""
        say_device(device_note)
        summary = evolve(cfg, resume=resume, replay=replay, seed_program=seed_program, display=live_display,
                         changed=changed)
    except KeyboardInterrupt:
        raise interrupted(cfg) from None
    except (ConfigError, TaskError, CandidateError) as exc:
        raise input_error(exc, as_json) from None
    except (ProposerUnavailable, LLMError, ValueError) as exc:
        raise bad_input(str(exc), kind="bad_option", as_json=as_json) from None
    raise typer.Exit(report_run(cfg, summary, as_json))


# What `check_task` evaluates: no candidate at all, so that only the task's own code runs to completion.
TASK_PROBE = '''import torch


class ModelNew(torch.nn.Module):
    """kernelsmith's check of the task before a run: the task's code runs, this stops at forward."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, *args, **kwargs):
        raise RuntimeError("the task check has no candidate")
'''


def check_task(cfg: Any, as_json: bool = False, device_note: str = "") -> None:
    """Before a new run, the task's own code once in the referee (its inputs twice, its init inputs, the
    reference's construction and forward at the run's sizes): a task that fails there would fail every
    candidate's evaluation the same way, so it is bad input (exit 2, with a hint), and no run dir is made. The
    judge it starts is kept for the run's first evaluation. Skipped where the run would be refused anyway (no
    model for `--proposer llm`) and for a run evaluated by a service (its own referee)."""
    from kernelsmith.referee.pool import LocalPool, RequestError
    from kernelsmith.settings import EvalRequest
    from kernelsmith.task import Task

    if cfg.task is None or cfg.referee_url or (cfg.proposer == "llm" and not cfg.models):
        say_device(device_note)
        return
    task = Task.load(cfg.task, cfg.overrides, device=cfg.device)
    try:
        pool = LocalPool(cfg.device, slots_per_gpu=1, cpu_slots=1, warm=0)
    except RequestError as exc:
        raise bad_input(f"setting 'device': {exc}", kind="bad_option", as_json=as_json) from None
    say_device(device_note)
    result = pool.run(EvalRequest(task_source=task.source, task_name=task.name, candidate_source=TASK_PROBE,
                                  options=cfg.eval_settings()))
    if result.get("fault") == "task":
        message, hint = task_failure(task, result, cfg.eval_timeout_s)
        raise bad_input(message, file=cfg.task, kind="task_failed", as_json=as_json, hint=hint, verdict=result)


def _resume_command(run_dir: Path) -> str:
    """The command that continues the run in `run_dir`, as this one was typed (`.venv/bin/kernelsmith`...)."""
    exe = sys.argv[0] if Path(sys.argv[0]).name == "kernelsmith" else "kernelsmith"
    return f"{shlex.quote(exe)} evolve --resume --run-dir {shlex.quote(str(run_dir))}"


def interrupted(cfg: Any) -> typer.Exit:
    """Ctrl-C: say how to go on (the run dir keeps everything finished so far)."""
    if cfg is not None and (Path(cfg.run_dir) / "run.db").exists():
        err.print(f"\ninterrupted; resume with: {escape(_resume_command(cfg.run_dir))}", highlight=False,
                  soft_wrap=True)
    else:
        err.print("\ninterrupted before the run started", highlight=False)
    return typer.Exit(EXIT_INTERRUPTED)


def _round_of(pid: str | None) -> str:
    """A program's round as the panel counts rounds (1..N); program ids count from 0 ("r0c1": round 1)."""
    if pid == "seed":
        return "the seed"
    try:
        return f"round {int(str(pid)[1:].split('c')[0]) + 1}"
    except ValueError:
        return str(pid)


def run_outcome(run_dir: Path) -> dict[str, Any]:
    """What the run's verdicts say, read back from its database: the verdicts by program, how many the referee
    gave, and the task's own failures among them."""
    from kernelsmith.workshop.record import RunReader

    with RunReader(run_dir) as reader:
        programs = [p for p in reader.programs() if isinstance(p.verdict, dict)]
    verdicts = {p.name: p.verdict for p in programs}
    judged = [p.verdict for p in programs if not p.unusable]  # the referee's (an unusable answer's is not)
    faults = [v for v in judged if v.get("fault") == "task"]
    return {"verdicts": verdicts, "judged": len(judged), "task_failures": len(faults),
            "task_failure": faults[0] if faults else None}


def report_run(cfg: Any, summary: dict[str, Any], as_json: bool = False) -> int:
    """The last lines of `evolve`, saying what the verdicts say, and its exit code: 0 with a correct program,
    1 without one, 2 when the task itself failed in every evaluation (a task that fails at once is stopped
    before the run by `check_task`; this is one that failed later, e.g. past the time limit at some sizes)."""
    from kernelsmith.task import Task, TaskError

    outcome = run_outcome(cfg.run_dir)
    show = err if as_json else out  # under --json, stdout carries the JSON alone
    best, status, speedup = summary.get("best_id"), summary.get("best_status"), summary.get("best_speedup")
    if summary.get("stopped"):
        show.print(f"stopped early: {escape(str(summary['stopped']))}", highlight=False)
    stopped_by_task = summary.get("task_failure")  # the engine stopped: the task failed before anything was correct
    every = outcome["task_failures"] and outcome["task_failures"] == outcome["judged"]
    if status != "correct" and (stopped_by_task or every):
        try:
            task = Task.load(cfg.task, cfg.overrides, device=cfg.device)
        except TaskError:
            task = None
        message, hint = task_failure(task, stopped_by_task or outcome["task_failure"], cfg.eval_timeout_s)
        how = ("the run stopped; `--resume` evaluates that program again" if stopped_by_task else
               f"every one of the run's {outcome['judged']} evaluations ended so")
        report_error(f"{message} ({how})", file=cfg.task, kind="task_failed", as_json=as_json, hint=hint,
                     summary=summary)
        return EXIT_BAD_INPUT
    if status == "correct":
        speed = f"{speedup:.3f}× the reference" if speedup else "correct (speed not measured on the cpu)"
        show.print(f"\n[bold]best[/]: {best} ({_round_of(best)}): {speed} → {cfg.run_dir / 'best.py'}",
                  highlight=False, soft_wrap=True)
        code = EXIT_CORRECT
    else:
        why = str(outcome["verdicts"].get(str(best), {}).get("error") or "")
        why = f": {why[:200]}{'…' if len(why) > 200 else ''}" if why else ""
        attempt = f"; best attempt {best} ({_round_of(best)}): {status}{why}" if best else ""
        if outcome["task_failures"]:
            attempt += f"; {outcome['task_failures']} evaluation(s) ended in the task's own failure"
        show.print(f"\n[bold red]no correct program[/] among {len(outcome['verdicts'])} programs{escape(attempt)} "
                  f"(verdicts in {cfg.run_dir / 'run.db'})", highlight=False, soft_wrap=True)
        code = EXIT_NOT_CORRECT
    if as_json:
        print(json.dumps({**summary, "correct": code == EXIT_CORRECT, "run_dir": str(cfg.run_dir)}))
    return code


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command("extract")
def extract_command(
    model_file: Annotated[Path, typer.Argument(help="A whole model in KernelBench format (Model, get_inputs, "
                                                    "get_init_inputs), e.g. a KernelBench level-3 file")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the task files and extract.json")],
    device: Annotated[str, typer.Option(help="auto (cuda when torch sees a GPU, else cpu), cuda, or cpu")] = "auto",
    top: Annotated[int, typer.Option(help="How many subgraphs to extract, by share of the model's time "
                                          "(1-100)")] = 5,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a model constant: NAME=VALUE")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds for the whole extraction (0 < s <= 86400)")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print extract.json (or the error) as JSON")] = False,
) -> None:
    """Cut MODEL_FILE into fusable subgraphs ranked by their share of its time; write the top ones as tasks.

    The model runs only in a referee sandbox. Exit code 0 when every top subgraph became a task that matches the
    model's own intermediates, 1 when one did not (listed with its reason), 2 for bad input (the model's own
    failure included).
    """
    from kernelsmith.extract.model import ExtractError, ExtractOptions, extract
    from kernelsmith.task import Task, TaskError, parse_overrides

    try:
        chosen, device_note = resolve_device(device)
    except ValueError as exc:
        raise bad_input(str(exc), kind="bad_option", as_json=as_json) from None
    if not 1 <= top <= 100:
        raise bad_input(f"--top {top}: expected 1 to 100", kind="bad_option", as_json=as_json)
    if not (0 < timeout <= 86400):  # NaN fails both comparisons
        raise bad_input(f"--timeout {timeout}: expected seconds in (0, 86400]", kind="bad_option", as_json=as_json)
    try:
        overrides = parse_overrides(set_)
        Task.load(model_file, overrides, device=chosen)  # every bad input is said before anything runs
    except TaskError as exc:
        raise input_error(exc, as_json) from None
    say_device(device_note)
    try:
        report = extract(model_file, out, ExtractOptions(device=chosen, top=top, overrides=overrides,
                                                         timeout_s=timeout))
    except TaskError as exc:
        raise input_error(exc, as_json) from None
    except ExtractError as exc:
        code = EXIT_BAD_INPUT if exc.kind == "model_failed" else EXIT_NOT_CORRECT
        report_error(str(exc), file=exc.file, kind=exc.kind, as_json=as_json, hint=exc.hint)
        raise typer.Exit(code) from None
    complete = not report["not_extracted"] and all(t["check"].get("ok") for t in report["tasks"])
    if as_json:
        print(json.dumps(report, indent=2))
        raise typer.Exit(EXIT_CORRECT if complete else EXIT_NOT_CORRECT)
    table = Table(box=None, pad_edge=False)
    for col in ("rank", "share", "subgraph", "line", "task file", "check"):
        table.add_column(col)
    rows = sorted([*report["tasks"], *report["not_extracted"]], key=lambda t: t["rank"])
    for t in rows:
        if "reason" in t:
            where, check = f"[red]not extracted:[/] {escape(t['reason'])}", ""
        else:
            c = t["check"]
            where = escape(t["file"])
            check = (f"[green]matches[/] (max abs {c['max_abs_err']:.2g})" if c.get("ok") and c.get("max_abs_err")
                     is not None else "[green]matches[/]" if c.get("ok") else f"[red]differs:[/] {escape(c['reason'])}")
        table.add_row(str(t["rank"]), f"{100 * t['share']:.1f}%", escape(t["name"]), str(t["line"] or "—"),
                      where, check)
    out_console = Console(width=None if sys.stdout.isatty() else 200)  # a pipe gets whole lines, not 80 columns
    out_console.print(table)
    rest = report["rest"]
    note = f"; fx failed ({report['trace_note']}), module hooks instead" if report["trace"] == "hooks" else ""
    out_console.print(f"{len(report['tasks'])} task(s) in {escape(str(out))} (extract.json); model "
                      f"{report['model_ms']} ms on {report['device']}, traced by {report['trace']}{escape(note)}; "
                      f"{rest['groups']} more subgraph(s) hold {100 * rest['share']:.1f}%, "
                      f"{100 * report['unattributed_share']:.1f}% is outside any", highlight=False)
    raise typer.Exit(EXIT_CORRECT if complete else EXIT_NOT_CORRECT)


@app.command("optimize")
def optimize_command(
    model_file: Annotated[Path, typer.Argument(help="A whole model in KernelBench format (Model, get_inputs, "
                                                    "get_init_inputs), e.g. a KernelBench level-3 file")],
    run_dir: Annotated[Path, typer.Option(help="The optimize dir: extract/, parts/, optimized.py, the report; "
                                               "the same command on it again continues")],
    top: Annotated[int, typer.Option(help="How many parts to evolve, by share of the model's time (1-20)")] = 3,
    swap: Annotated[str, typer.Option(help="faster: swap in a correct winner whose speedup interval lies above 1; "
                                           "correct: any correct winner (the CPU, where nothing is timed)")] = "faster",
    rounds: Annotated[int | None, typer.Option(help="Rounds per part (default 40)")] = None,
    population: Annotated[int | None, typer.Option(help="Children proposed per round")] = None,
    model: Annotated[str | None, typer.Option(help="Model name at the OpenAI-compatible endpoint")] = None,
    proposer: Annotated[str | None, typer.Option(
        help="auto (model if given, else offline), llm, offline (no model: seed + tuner), mixed")] = None,
    base_url: Annotated[str | None, typer.Option(help="Endpoint, e.g. http://localhost:8000/v1 (vLLM)")] = None,
    api_key_env: Annotated[str, typer.Option(help="Environment variable holding the API key")] = "OPENAI_API_KEY",
    device: Annotated[str | None, typer.Option(help="auto (cuda when torch sees a GPU, else cpu), cuda, or cpu")] = None,
    backend: Annotated[str | None, typer.Option(help="triton, or cuda (CUDA C++ through load_inline)")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML file with any evolve setting; flags override it")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Override a model constant: NAME=VALUE")] = None,
    timeout: Annotated[float, typer.Option(help="Seconds for the extraction (0 < s <= 86400)")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print optimize.json (or the error) as JSON")] = False,
) -> None:
    """Make MODEL_FILE faster: extract its top parts, evolve each, assemble optimized.py, judge it end to end.

    Exit code 0 when optimized.py has parts swapped in and the referee finds it correct, 1 when no part was
    swapped in or it is not correct, 2 for bad input (the model's own failure, a DIR started with another model
    or settings), 130 when interrupted (the same command continues).
    """
    import os

    from kernelsmith.optimize import OptimizeError, OptimizeOptions, optimize
    from kernelsmith.optimize.run import REPORT_MD, markdown
    from kernelsmith.task import Task, TaskError, parse_overrides
    from kernelsmith.workshop.config import ConfigError, load_config

    if not 1 <= top <= 20:
        raise bad_input(f"--top {top}: expected 1 to 20", kind="bad_option", as_json=as_json)
    if not (0 < timeout <= 86400):  # NaN fails both comparisons
        raise bad_input(f"--timeout {timeout}: expected seconds in (0, 86400]", kind="bad_option", as_json=as_json)
    flags: dict = {"rounds": rounds, "population": population, "run_dir": run_dir, "proposer": proposer,
                   "backend": backend}
    try:
        if model:
            flags["models"] = [{"name": model, "base_url": base_url, "api_key_env": api_key_env}]
        if set_:
            flags["overrides"] = parse_overrides(set_)
        device_note = ""
        if device is not None:
            flags["device"], device_note = resolve_device(device)
        cfg = load_config(config, flags)
        if "device" not in cfg.model_fields_set:
            chosen, device_note = resolve_device(None)
            cfg = cfg.model_copy(update={"device": chosen})
        Task.load(model_file, cfg.overrides, device=cfg.device)  # every bad input is said before anything runs
        say_device(device_note)
        report = optimize(model_file, cfg, OptimizeOptions(top=top, swap=swap, extract_timeout_s=timeout),
                          say=None if as_json else lambda line: err.print(escape(line), highlight=False,
                                                                          soft_wrap=True))
    except KeyboardInterrupt:
        err.print(f"\ninterrupted; the same command continues the optimize in {escape(str(run_dir))}",
                  highlight=False, soft_wrap=True)
        sys.stderr.flush()
        os._exit(EXIT_INTERRUPTED)  # the parts' threads stop with the process; their runs resume next time
    except (ConfigError, TaskError) as exc:
        raise input_error(exc, as_json) from None
    except OptimizeError as exc:
        if exc.kind in ("model_failed", "changed", "bad_input", "bad_option"):
            raise bad_input(str(exc), file=exc.file, kind=exc.kind, as_json=as_json, hint=exc.hint) from None
        report_error(str(exc), file=exc.file, kind=exc.kind, as_json=as_json, hint=exc.hint)
        raise typer.Exit(EXIT_NOT_CORRECT) from None
    except ValueError as exc:
        raise bad_input(str(exc), kind="bad_option", as_json=as_json) from None
    verdict = report.get("verdict") or {}
    code = EXIT_CORRECT if verdict.get("correct") else EXIT_NOT_CORRECT
    if as_json:
        print(json.dumps(report, indent=2))
        raise typer.Exit(code)
    out_console = Console(width=None if sys.stdout.isatty() else 200)
    out_console.print(escape(markdown(report).split("\n\n", 1)[1].rstrip()), highlight=False)
    out_console.print(f"report: {escape(str(run_dir / REPORT_MD))}", highlight=False)
    raise typer.Exit(code)


@app.command("export")
def export_command(
    run_dir: Annotated[Path, typer.Argument(help="An evolve run dir (run.db, config.yaml, best.py)")],
    out: Annotated[Path, typer.Option("--out", help="The package dir to write (new, empty, or a previous "
                                                    "export's); its name is the package's")],
    as_json: Annotated[bool, typer.Option("--json", help="Print export.json (or the error) as JSON")] = False,
) -> None:
    """Write RUN_DIR's best correct program as a drop-in package: kernels, `apply(model)`, a pytest file, README.

    The package needs only torch and triton. Exit code 0 when written, 2 for bad input (not a run dir, no correct
    program, a PKG_DIR holding other files).
    """
    from kernelsmith.export import ExportError, export

    try:
        manifest = export(run_dir, out)
    except ExportError as exc:
        raise bad_input(str(exc), file=exc.file, kind=exc.kind, as_json=as_json) from None
    if as_json:
        print(json.dumps({**manifest, "out": str(out)}, indent=2))
        return
    src = manifest["source"]
    out_console = Console(width=None if sys.stdout.isatty() else 200)
    out_console.print(f"package {escape(str(out))}: {escape(src['program'])} of task {escape(src['task'])}, "
                      f"speedup {escape(manifest['speedup_text'])}; check it with: python -m pytest "
                      f"{escape(str(out))}", highlight=False)


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Address to bind; beyond localhost a token is required")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8470,
    device: Annotated[str, typer.Option(help="auto (cuda when torch sees a GPU, else cpu), cuda, or cpu "
                                             "(Triton interpreter; no timing)")] = "auto",
    gpus: Annotated[str | None, typer.Option(help="GPU indices to use, e.g. 0,1 (default: all visible)")] = None,
    slots_per_gpu: Annotated[int | None, typer.Option(
        help="Evaluations at once per GPU (timing still runs alone; default: the cores but two, shared among "
             "the GPUs, 2 to 12)")] = None,
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
        device, device_note = resolve_device(device)
    except ValueError as exc:
        raise bad_input(str(exc), kind="bad_option") from None
    say_device(device_note)
    if not 0 < max_request_mb <= 1024:  # NaN fails this too
        raise bad_input(f"--max-request-mb {max_request_mb}: expected a number in (0, 1024]", kind="bad_option")
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
    from kernelsmith.referee.service import ServiceSettings, create_app

    try:
        if backend == "ray":
            from kernelsmith.referee.ray_pool import RayPool

            pool = RayPool(device, address=ray_address, slots_per_actor=(slots_per_gpu or 2) if device == "cuda" else 1)
        else:
            pool = LocalPool(device, gpus=gpu_list, slots_per_gpu=slots_per_gpu, cpu_slots=cpu_slots)
        store = JobStore(db)
    except (RequestError, RuntimeError, OSError) as exc:
        raise bad_input(str(exc)) from None
    try:  # KERNELSMITH_ALLOWED_HOSTS, _MAX_FAULTS, _CLIENT_MAX_JOBS, _HEARTBEAT_TIMEOUT_S, _JOB_LIMIT_S
        service_settings = ServiceSettings.from_env()
    except ValueError as exc:
        raise bad_input(str(exc), kind="bad_option") from None
    application = create_app(store, pool, token=token, device=device, max_request_bytes=int(max_request_mb * 2**20),
                             settings=service_settings, host=host)
    err.print(f"kernelsmith referee on http://{host}:{port} ({backend}, {device}, {pool.capacity} slots, "
              f"jobs in {db})", highlight=False)
    uvicorn.run(application, host=host, port=port, log_level="warning")


def live_display(progress):  # noqa: ANN001, ANN201 - Progress -> context manager
    """A live panel: round k/N, best speedup, correct rate, tokens and cost, work in flight."""
    from rich.live import Live

    def render() -> Table:
        p = progress
        t = Table(show_header=False, box=None, pad_edge=False)
        if not p.correct:  # the archive's best is not correct: say so, never "correct"
            best = "no correct program yet" + (f" ({p.evaluated} evaluated)" if p.evaluated else "")
        elif p.best_speedup:
            best = f"{p.best_speedup:.3f}× ({p.best_id}, {_round_of(p.best_id)})"
        else:
            best = f"correct, speed not measured on the cpu ({p.best_id}, {_round_of(p.best_id)})"
        rate = f"{p.correct}/{p.evaluated}" if p.evaluated else "—"
        t.add_row("round", f"{p.round}/{p.rounds}")
        t.add_row("best", best)
        t.add_row("correct", rate)
        t.add_row("proposals", f"{p.proposed} ({p.duplicates} duplicates, {p.unusable} unusable)")
        t.add_row("in flight", f"{p.in_flight_proposals} proposals, {p.in_flight_evaluations} evaluations")
        t.add_row("tokens", f"{p.tokens} (${p.cost_usd:.4f})")
        for e in p.events[-3:]:
            t.add_row("", e)
        return t

    @contextmanager
    def panel() -> Iterator[Live]:
        with Live(get_renderable=render, console=err, refresh_per_second=2, transient=False) as live:
            yield live
        if not err.is_terminal:  # rich ends the panel's last line only on a terminal
            err.line()

    return panel()


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
