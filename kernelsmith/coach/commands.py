"""`kernelsmith data sft|rl` and `kernelsmith train sft|grpo`: registered on the main typer app by `register`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kernelsmith.settings import check_device

EXIT_BAD_INPUT = 2
err = Console(stderr=True)
out = Console()

data_app = typer.Typer(no_args_is_help=True, help="Training data from evolution runs (SFT samples, RL prompts).")
train_app = typer.Typer(no_args_is_help=True, help="Train a model on kernelsmith data with TRL (SFT, GRPO).")

RunDirs = Annotated[list[Path], typer.Argument(help="Run dirs written by `kernelsmith evolve` (each with run.db)")]


def _bad(message: str) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(EXIT_BAD_INPUT)


@data_app.command("sft")
def data_sft(
    run_dirs: RunDirs,
    out_file: Annotated[Path, typer.Option("--out", help="Output JSON Lines file (a card goes beside it: .md)")],
    mode: Annotated[str, typer.Option(help="all: every qualifying step; first: PyTorch→Triton steps only; "
                                           "best: each lineage's highest-gain steps")] = "all",
    min_gain: Annotated[float, typer.Option(help="A later step is kept when child/parent speedup >= this (and > 1)")] = 1.0,
    balance: Annotated[bool, typer.Option("--balance", help="Cap easy tasks at the median count, weight samples "
                                                             "by inverse task success rate")] = False,
    max_per_task: Annotated[int | None, typer.Option(help="At most N samples per task (highest gain first)")] = None,
    top_k: Annotated[int, typer.Option(help="mode best: steps kept per lineage")] = 1,
) -> None:
    """SFT samples (prompt → the response that produced a correct / faster child) from evolution runs."""
    from kernelsmith.coach.sft import build_sft
    from kernelsmith.coach.trajectories import CoachError

    try:
        sel = build_sft(run_dirs, out_file, mode=mode, min_gain=min_gain, balance=balance, max_per_task=max_per_task,
                        top_k=top_k)
    except (CoachError, ValueError) as exc:
        raise _bad(str(exc)) from None
    s = sel.stats
    out.print(f"{s['samples']} samples from {s['steps']} steps → {out_file} (card {out_file.with_suffix('.md')})",
              highlight=False)
    for why, n in s["dropped"].items():
        out.print(f"  dropped {n}: {why}", highlight=False)
    if s["unmeasured_runs"]:
        out.print("  note: runs without measured speedups (CPU) contribute first steps only", highlight=False)


@data_app.command("rl")
def data_rl(
    run_dirs: RunDirs,
    out_file: Annotated[Path, typer.Option("--out", help="Output JSON Lines file (a card goes beside it: .md)")],
    device: Annotated[str | None, typer.Option(help="Device the reward evaluates on, which fixes the task sizes "
                                                    "(default: each run's)")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds per evaluation (default: each run's)")] = None,
    max_per_task: Annotated[int | None, typer.Option(help="At most N prompts per task")] = None,
) -> None:
    """RL prompts (task, parent, prompt) for TRL's GRPOTrainer and verl."""
    from kernelsmith.coach.rl import build_rl
    from kernelsmith.coach.trajectories import CoachError

    try:
        stats = build_rl(run_dirs, out_file, device=device, timeout_s=timeout, max_per_task=max_per_task)
    except (CoachError, ValueError) as exc:
        raise _bad(str(exc)) from None
    out.print(f"{stats['rows']} prompts → {out_file} (card {out_file.with_suffix('.md')})", highlight=False)


Model = Annotated[str, typer.Option(help="A model directory or a Hugging Face model name")]
Data = Annotated[Path, typer.Option(help="A file from `kernelsmith data`")]


@train_app.command("sft")
def train_sft_command(
    model: Model,
    data: Data,
    output_dir: Annotated[Path, typer.Option(help="Where the model (or LoRA adapter) goes")] = Path("runs/sft"),
    lora: Annotated[bool, typer.Option("--lora", help="Train a LoRA adapter (PEFT) instead of all weights")] = False,
    lora_r: int = 16,
    lora_alpha: int = 32,
    max_steps: Annotated[int, typer.Option(help="Stop after N optimiser steps (-1: epochs decide)")] = -1,
    epochs: float = 1.0,
    lr: float = 1e-5,
    batch_size: int = 1,
    grad_accum: int = 1,
    max_length: Annotated[int, typer.Option(help="Tokens per sample (longer ones are truncated)")] = 8192,
    seed: int = 0,
) -> None:
    """Supervised fine-tuning (TRL SFTTrainer) on a `kernelsmith data sft` file; loss on the response only."""
    from kernelsmith.coach.train import train_sft
    from kernelsmith.coach.trajectories import CoachError

    try:
        res = train_sft(model, data, output_dir, lora=lora, lora_r=lora_r, lora_alpha=lora_alpha,
                        max_steps=max_steps, epochs=epochs, lr=lr, batch_size=batch_size, grad_accum=grad_accum,
                        max_length=max_length, seed=seed)
    except CoachError as exc:
        raise _bad(str(exc)) from None
    losses = res.losses
    out.print(f"trained {len(losses)} logged steps, last loss {losses[-1] if losses else 'n/a'} → {res.output_dir}",
              highlight=False)


@train_app.command("grpo")
def train_grpo_command(
    model: Model,
    data: Data,
    output_dir: Annotated[Path, typer.Option(help="Where the model (or LoRA adapter) goes")] = Path("runs/grpo"),
    lora: Annotated[bool, typer.Option("--lora", help="Train a LoRA adapter (PEFT) instead of all weights")] = False,
    lora_r: int = 16,
    lora_alpha: int = 32,
    max_steps: Annotated[int, typer.Option(help="Stop after N optimiser steps (-1: epochs decide)")] = -1,
    epochs: float = 1.0,
    lr: float = 1e-6,
    num_generations: Annotated[int, typer.Option(help="Completions per prompt")] = 8,
    batch_size: Annotated[int | None, typer.Option(help="Completions per device step (default num_generations)")] = None,
    max_completion_length: int = 4096,
    temperature: float = 1.0,
    beta: Annotated[float, typer.Option(help="KL coefficient (0: no reference model)")] = 0.0,
    device: Annotated[str | None, typer.Option(help="Referee device override (default: the data's)")] = None,
    eval_timeout: Annotated[float | None, typer.Option(help="Seconds per evaluation (default: the data's)")] = None,
    eval_workers: Annotated[int, typer.Option(help="Concurrent local evaluations")] = 4,
    service_url: Annotated[str | None, typer.Option(help="Referee service URL instead of local evaluation")] = None,
    token_env: Annotated[str, typer.Option(help="Environment variable holding the service token")] = "KERNELSMITH_TOKEN",
    seed: int = 0,
) -> None:
    """GRPO (TRL GRPOTrainer) on a `kernelsmith data rl` file, rewarded by the referee."""
    from kernelsmith.coach.train import train_grpo
    from kernelsmith.coach.trajectories import CoachError

    try:
        check_device(device)
    except ValueError as exc:
        raise _bad(str(exc)) from None
    try:
        res = train_grpo(model, data, output_dir, lora=lora, lora_r=lora_r, lora_alpha=lora_alpha,
                         max_steps=max_steps, epochs=epochs, lr=lr, batch_size=batch_size,
                         num_generations=num_generations, max_completion_length=max_completion_length,
                         temperature=temperature, beta=beta, seed=seed, device=device, eval_timeout_s=eval_timeout,
                         eval_workers=eval_workers, service_url=service_url,
                         token=os.environ.get(token_env) if service_url else None)
    except CoachError as exc:
        raise _bad(str(exc)) from None
    counts = dict(getattr(res.reward, "counts", {}))
    out.print(f"trained {len(res.losses)} logged steps → {res.output_dir}; completions by status: {counts}",
              highlight=False)


def register(app: typer.Typer) -> None:
    """Add `data` and `train` to the main app."""
    app.add_typer(data_app, name="data")
    app.add_typer(train_app, name="train")
