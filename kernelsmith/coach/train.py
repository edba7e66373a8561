"""Training on TRL: supervised fine-tuning on `kernelsmith data sft` files, GRPO on `kernelsmith data rl` files
with the referee as the reward. LoRA (PEFT) is an option for both.

SFT turns each `messages` sample into TRL's conversational prompt/completion form (system + user as the
prompt, the assistant turn as the completion), so the loss covers the response only. A tokenizer without a
chat template gets a plain one (role markers and the end-of-sequence token), with a warning.

Both write the model (or adapter) to `output_dir` and `train_log.json` (the trainer's log history: losses,
rewards); GRPO also writes `reward_log.json` (every judged completion's status and reward).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelsmith.coach.trajectories import CoachError

FALLBACK_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{{ eos_token }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass
class TrainResult:
    output_dir: Path
    log_history: list[dict[str, Any]]
    reward: Any = None  # the KernelReward (GRPO)

    @property
    def losses(self) -> list[float]:
        return [float(h["loss"]) for h in self.log_history if "loss" in h]


def _check_inputs(model: str, data: str | Path) -> Path:
    data = Path(data)
    if not data.is_file():
        raise CoachError(f"{data}: no such data file (make one with `kernelsmith data sft|rl`)")
    looks_local = model.startswith((".", "/", "~")) or Path(model).exists() or model.count("/") > 1
    if looks_local and not (Path(model).expanduser() / "config.json").is_file():
        raise CoachError(f"{model}: not a model directory (no config.json)")
    return data


def _load(model: str):  # noqa: ANN202 - (model, tokenizer)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(model)
        lm = AutoModelForCausalLM.from_pretrained(model)
    except (OSError, ValueError) as exc:
        raise CoachError(f"{model}: cannot load the model or its tokenizer ({type(exc).__name__}: {exc})") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if not getattr(tok, "chat_template", None):
        warnings.warn(f"{model}: the tokenizer has no chat template; using a plain one", stacklevel=2)
        tok.chat_template = FALLBACK_CHAT_TEMPLATE
    return lm, tok


def _lora(lora: bool, r: int, alpha: int, dropout: float):  # noqa: ANN202 - LoraConfig | None
    if not lora:
        return None
    from peft import LoraConfig

    return LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules="all-linear",
                      task_type="CAUSAL_LM")


def _common(output_dir: Path, max_steps: int, epochs: float, lr: float, batch_size: int, grad_accum: int,
            seed: int, logging_steps: int) -> dict[str, Any]:
    import torch

    return dict(output_dir=str(output_dir), max_steps=max_steps if max_steps > 0 else -1, num_train_epochs=epochs,
                learning_rate=lr, per_device_train_batch_size=batch_size, gradient_accumulation_steps=grad_accum,
                seed=seed, logging_steps=logging_steps, save_strategy="no", report_to="none",
                use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available() and torch.cuda.is_bf16_supported(),
                dataloader_num_workers=0, disable_tqdm=True)


def _finish(trainer: Any, output_dir: Path) -> list[dict[str, Any]]:
    trainer.save_model(str(output_dir))
    trainer.processing_class.save_pretrained(str(output_dir))
    history = trainer.state.log_history
    (output_dir / "train_log.json").write_text(json.dumps(history, indent=2, default=str))
    return history


def sft_dataset(path: Path):  # noqa: ANN201 - datasets.Dataset
    """The `messages` samples as TRL's conversational prompt/completion pairs (loss on the response only)."""
    from datasets import Dataset

    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            msgs = json.loads(line)["messages"]
        except (ValueError, KeyError, TypeError):
            raise CoachError(f"{path}:{n}: not an SFT sample (a JSON object with `messages`)") from None
        if not msgs or msgs[-1].get("role") != "assistant":
            raise CoachError(f"{path}:{n}: the last message must be the assistant's")
        rows.append({"prompt": msgs[:-1], "completion": msgs[-1:]})
    if not rows:
        raise CoachError(f"{path}: no samples")
    return Dataset.from_list(rows)


def train_sft(model: str, data: str | Path, output_dir: str | Path, *, lora: bool = False, lora_r: int = 16,
              lora_alpha: int = 32, lora_dropout: float = 0.05, max_steps: int = -1, epochs: float = 1.0,
              lr: float = 1e-5, batch_size: int = 1, grad_accum: int = 1, max_length: int = 8192, seed: int = 0,
              logging_steps: int = 1) -> TrainResult:
    data = _check_inputs(model, data)
    from trl import SFTConfig, SFTTrainer

    output_dir = Path(output_dir)
    dataset = sft_dataset(data)
    lm, tok = _load(model)
    args = SFTConfig(**_common(output_dir, max_steps, epochs, lr, batch_size, grad_accum, seed, logging_steps),
                     max_length=max_length)
    trainer = SFTTrainer(model=lm, args=args, train_dataset=dataset, processing_class=tok,
                         peft_config=_lora(lora, lora_r, lora_alpha, lora_dropout))
    if len(trainer.train_dataset) == 0:
        raise CoachError(f"no sample left to train on: each one's response lies beyond max_length {max_length} "
                         "tokens (the prompt alone fills it); raise --max-length")
    trainer.train()
    return TrainResult(output_dir, _finish(trainer, output_dir))


def rl_dataset(path: Path):  # noqa: ANN201 - datasets.Dataset
    from datasets import Dataset

    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise CoachError(f"{path}:{n}: not JSON") from None
        if not isinstance(row, dict) or "prompt" not in row or not ("task_source" in row or "reward_model" in row):
            raise CoachError(f"{path}:{n}: not an RL row (`prompt` and `task_source` or `reward_model`)")
        if isinstance(row.get("reward_model"), dict):  # nested dicts with JSON text: Arrow-friendly as is
            row["reward_model"] = {k: str(v) for k, v in row["reward_model"].items()}
        if isinstance(row.get("extra_info"), dict):
            row["extra_info"] = json.dumps(row["extra_info"])
        rows.append(row)
    if not rows:
        raise CoachError(f"{path}: no rows")
    return Dataset.from_list(rows)


def train_grpo(model: str, data: str | Path, output_dir: str | Path, *, lora: bool = False, lora_r: int = 16,
               lora_alpha: int = 32, lora_dropout: float = 0.05, max_steps: int = -1, epochs: float = 1.0,
               lr: float = 1e-6, batch_size: int | None = None, grad_accum: int = 1, num_generations: int = 8,
               max_completion_length: int = 4096, temperature: float = 1.0, beta: float = 0.0, seed: int = 0,
               logging_steps: int = 1, reward: Any = None, device: str | None = None, eval_timeout_s: float | None = None,
               eval_workers: int = 4, service_url: str | None = None, token: str | None = None,
               generation_kwargs: dict[str, Any] | None = None) -> TrainResult:
    """GRPO with `KernelReward` (or `reward`). `batch_size` defaults to `num_generations` (one prompt a step)."""
    data = _check_inputs(model, data)
    if num_generations < 2:
        raise CoachError("num_generations must be at least 2 (GRPO compares completions of one prompt)")
    from trl import GRPOConfig, GRPOTrainer

    from kernelsmith.coach.reward import KernelReward

    output_dir = Path(output_dir)
    dataset = rl_dataset(data)
    lm, tok = _load(model)
    reward = reward or KernelReward(service_url=service_url, token=token, max_workers=eval_workers, device=device,
                                    timeout_s=eval_timeout_s)
    bs = batch_size or num_generations
    args = GRPOConfig(**_common(output_dir, max_steps, epochs, lr, bs, grad_accum, seed, logging_steps),
                      num_generations=num_generations, max_completion_length=max_completion_length,
                      temperature=temperature, beta=beta, generation_kwargs=generation_kwargs)
    trainer = GRPOTrainer(model=lm, reward_funcs=[reward], args=args, train_dataset=dataset, processing_class=tok,
                          peft_config=_lora(lora, lora_r, lora_alpha, lora_dropout))
    trainer.train()
    history = _finish(trainer, output_dir)
    if hasattr(reward, "history"):
        (output_dir / "reward_log.json").write_text(json.dumps(reward.history, indent=2, default=str))
    bad = [h["loss"] for h in history if "loss" in h and not math.isfinite(float(h["loss"]))]
    if bad:
        warnings.warn(f"non-finite GRPO losses: {bad}", stacklevel=2)
    return TrainResult(output_dir, history, reward)
