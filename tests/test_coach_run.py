"""The coach end to end on a real CPU evolution (offline proposer): what the run store holds per step, the SFT and
RL files made from it, and real TRL training on a tiny random model (SFT, SFT+LoRA, GRPO with the referee's
reward on the shipped ReLU task). Nothing downloads: HF_HUB_OFFLINE is set and model and tokenizer are built here."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelsmith.candidate import Candidate
from kernelsmith.cli import app
from kernelsmith.coach.trajectories import load_steps, prompt_digest
from kernelsmith.workshop.parse import parse_response
from kernelsmith.workshop.store import RunStore

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tasks/level2/02_scale_bias_clamp_sigmoid.py"
SOLUTION = (ROOT / "solutions/level1/01_relu.py").read_text()
WRONG = SOLUTION.replace("tl.where(x < 0, 0.0, x)", "tl.where(x < 0, 0.5, x)")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("coach") / "run"
    res = CliRunner().invoke(app, ["evolve", str(TASK), "--device", "cpu", "--rounds", "2", "--population", "2",
                                   "--run-dir", str(d)])
    assert res.exit_code == 0, res.output
    return d


def test_store_holds_prompt_and_response_of_every_step(run_dir: Path) -> None:
    store = RunStore(run_dir / "run.db")
    programs = store.programs("main")
    prompts = store.prompts("main")
    assert len(prompts) == 4  # 2 rounds x 2 children
    answers = {a["child"]: a for a in store.answers("main")}  # every child's own answer, under its name
    assert all(answers[p["child"]]["prompt_hash"] == p["hash"] for p in prompts)
    outcomes = [answers[c]["outcome"] for c in sorted(answers)]
    # round 0: the seed and a configuration of it; round 1: the tuner's, a duplicate of an earlier program is
    # not stored (which configurations it samples follows the program's text, so the count may vary)
    assert outcomes[:2] == ["program", "program"] and set(outcomes[2:]) <= {"program", "duplicate"}
    store.close()
    (run,) = load_steps([run_dir])
    assert not run.unlinked and len(run.steps) == len(programs) == outcomes.count("program")
    for s in run.steps:
        assert s.prompt_verified and prompt_digest(s.messages) == s.prompt_hash
        base = s.parent_code or ""
        assert parse_response(s.response, Candidate(base)).candidate.digest == s.child_digest
        assert s.child_status == "correct" and s.child_speedup is None  # CPU: no timing
    kinds = sorted(s.kind for s in run.steps)
    assert kinds == ["optimise"] * (len(programs) - 2) + ["translate", "translate"]
    assert run.reference == TASK.read_text()


def test_cpu_run_gives_first_steps_only(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.jsonl"
    res = CliRunner().invoke(app, ["data", "sft", str(run_dir), "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["kind"], r["step"], r["speedup"]) for r in rows] == [("translate", "r0c0", None),
                                                                     ("translate", "r0c1", None)]
    card = out.with_suffix(".md").read_text()
    assert "Correctness-only data" in card and "only translation (first) steps qualify" in card
    store = RunStore(run_dir / "run.db")
    later = sum(1 for r in store.programs("main") if r["round"] > 0)
    store.close()
    assert f"| later step without measured speedups | {later} |" in card


def test_rl_rows_for_trl_and_verl(run_dir: Path, tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "rl.jsonl"
    assert CliRunner().invoke(app, ["data", "rl", str(run_dir), "--out", str(out)]).exit_code == 0
    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert ds.num_rows == 4
    for col in ("prompt", "data_source", "reward_model", "extra_info", "task_source", "parent_code"):
        assert col in ds.column_names
    row = ds[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and row["parent_code"] == ""
    assert "CPU_OVERRIDES = {}" in row["task_source"] and "batch_size = 2" in row["task_source"]
    assert json.loads(row["eval_options"])["device"] == "cpu"


# ---- training -----------------------------------------------------------------------------------------------------
SPECIALS = ["<unk>", "<pad>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def tiny_model(path: Path, texts: list[str], extra_tokens: list[str] = (), vocab_limit: int = 400) -> Path:
    """A randomly initialised 2-layer Llama (hidden 32) and a word-level tokenizer trained here on `texts`."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.train_from_iterator(texts, trainers.WordLevelTrainer(vocab_size=vocab_limit, special_tokens=SPECIALS))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", pad_token="<pad>", eos_token="<|end|>")
    tok.add_tokens(list(extra_tokens))
    tok.chat_template = CHAT
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=8192,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_train_sft_and_lora(run_dir: Path, tmp_path: Path) -> None:
    from kernelsmith.coach.sft import build_sft
    from kernelsmith.coach.train import train_sft

    data = tmp_path / "sft.jsonl"
    build_sft([run_dir], data)
    texts = [m["content"] for line in data.read_text().splitlines() for m in json.loads(line)["messages"]]
    model = tiny_model(tmp_path / "tiny", texts)
    res = CliRunner().invoke(app, ["train", "sft", "--model", str(model), "--data", str(data), "--output-dir",
                                   str(tmp_path / "out"), "--max-steps", "4", "--lr", "0.01", "--max-length", "4096"])
    assert res.exit_code == 0, res.output
    log = json.loads((tmp_path / "out" / "train_log.json").read_text())
    losses = [h["loss"] for h in log if "loss" in h]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses) and losses[-1] < losses[0]
    assert (tmp_path / "out" / "config.json").exists()
    lora = train_sft(str(model), data, tmp_path / "lora", lora=True, lora_r=4, lora_alpha=8, max_steps=2,
                     lr=0.01, max_length=4096)
    assert len(lora.losses) == 2 and all(math.isfinite(x) for x in lora.losses)
    assert (tmp_path / "lora" / "adapter_config.json").exists()


def test_train_bad_inputs(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["train", "sft", "--model", str(tmp_path), "--data", str(tmp_path / "none.jsonl")])
    assert res.exit_code == 2 and "no such data file" in res.output
    data = tmp_path / "d.jsonl"
    data.write_text('{"messages": []}\n')
    res = runner.invoke(app, ["train", "grpo", "--model", str(tmp_path / "no-model"), "--data", str(data)])
    assert res.exit_code == 2 and "not a model directory" in res.output
    res = runner.invoke(app, ["train", "sft", "--model", "./missing/model", "--data", str(data)])
    assert res.exit_code == 2
    res = runner.invoke(app, ["train", "sft", "--model", str(tmp_path), "--data", str(data)])
    assert res.exit_code == 2 and "not a model directory" in res.output


def test_train_grpo_with_the_referee(tmp_path: Path) -> None:
    """2 GRPO steps x 4 completions of a random model on the ReLU task (CPU sizes). Its vocabulary includes a
    correct and a wrong fenced program as single tokens, so some completions reach the referee."""
    from kernelsmith.coach.reward import KernelReward
    from kernelsmith.coach.rl import effective_task_source
    from kernelsmith.coach.train import train_grpo
    from kernelsmith.workshop.prompt import build_prompt

    relu = (ROOT / "tasks/level1/01_relu.py").read_text()
    prompt = build_prompt(task_name="01_relu", reference=relu, parent_code="(none yet)", parent_verdict=None)
    row = {"prompt": prompt.messages, "task_name": "01_relu", "task_source": effective_task_source(relu, {}, "cpu"),
           "parent_code": "", "parent_speedup": None, "parent_status": "",
           "eval_options": json.dumps({"device": "cpu", "policy": "strict", "timeout_s": 120.0}),
           "response_mode": "full"}
    data = tmp_path / "rl.jsonl"
    data.write_text(json.dumps(row) + "\n")
    good, bad = f"```python\n{SOLUTION}\n```", f"```python\n{WRONG}\n```"
    model = tiny_model(tmp_path / "tiny", ["kernel triton block warp"], extra_tokens=[good, bad], vocab_limit=12)
    reward = KernelReward(max_workers=2)
    res = train_grpo(str(model), data, tmp_path / "grpo", reward=reward, max_steps=2, num_generations=4,
                     max_completion_length=6, lr=1e-3, seed=3)
    assert reward.calls == 2 and len(reward.history) == 8
    judged = [r for r in reward.history if r["judged"]]
    assert judged, "no completion reached the referee"
    assert all(r["status"] in ("correct", "incorrect") for r in judged)
    assert all(r["status"] == "unparseable" for r in reward.history if not r["judged"])
    assert reward.evaluations >= 1 and all(r["reward"] is not None for r in reward.history)
    assert res.losses and all(math.isfinite(x) for x in res.losses)
    rewards = [h["reward"] for h in res.log_history if "reward" in h]
    assert rewards and all(math.isfinite(x) for x in rewards)
    assert (tmp_path / "grpo" / "reward_log.json").exists()
