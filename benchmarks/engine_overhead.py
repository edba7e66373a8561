"""The engine's own cost per candidate, and whether it grows with the run database.

A scripted local OpenAI-compatible server answers at once and the referee is replaced by a stand-in that
returns a fixed verdict after `--eval-ms`, so what remains is the engine: prompt building, the archive, the
store's writes and reads, parsing, bookkeeping. Rounds run one child at a time (population 1, one worker)
so the per-round times can be read as per-candidate overhead. Prints the overhead at the first and the last
rounds: a constant-cost engine shows no growth.

With `--real DEVICE` the stand-in is replaced by the real referee (`evaluate()` of the ReLU solution against
tasks/level1/01_relu.py on that device, each proposal a distinct program), and the overhead is reported as a
share of the measured evaluation time: the number the workshop issue asks for on the GPU.

    python benchmarks/engine_overhead.py --rounds 400 --eval-ms 20 --out engine.json
    python benchmarks/engine_overhead.py --rounds 8 --real cuda --out engine_cuda.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from openai_stub import OpenAIStub, Reply  # noqa: E402

from kernelsmith.candidate import Candidate  # noqa: E402
from kernelsmith.workshop.config import RunConfig  # noqa: E402
from kernelsmith.workshop.engine import Engine, Progress  # noqa: E402
from kernelsmith.workshop.proposers import make_proposer  # noqa: E402
from kernelsmith.workshop.run import RUN_ID, Ledger, _answers  # noqa: E402
from kernelsmith.workshop.store import RunStore  # noqa: E402

PROGRAM = (ROOT / "solutions" / "level1" / "01_relu.py").read_text()


class Counter:
    n = 0


def responder(body: dict) -> Reply:
    Counter.n += 1  # a distinct program each time (inside the EVOLVE-BLOCK), so nothing is skipped as a duplicate
    program = PROGRAM.replace("# EVOLVE-BLOCK-START\n", f"# EVOLVE-BLOCK-START\nVARIANT = {Counter.n}\n", 1)
    return Reply.ok(f"```python\n{program}\n```", prompt_tokens=2000, completion_tokens=800)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=400)
    ap.add_argument("--eval-ms", type=float, default=20.0)
    ap.add_argument("--real", choices=["cpu", "cuda"], help="evaluate with the real referee on this device")
    ap.add_argument("--out", type=Path, default=Path("engine.json"))
    args = ap.parse_args()
    eval_s = args.eval_ms / 1e3
    round_times: list[float] = []
    eval_times: list[float] = []
    statuses: list[str] = []

    def judge(candidate: Candidate) -> dict:
        t0 = time.perf_counter()
        if args.real:
            from kernelsmith.referee.evaluation import EvalOptions, evaluate

            verdict = evaluate(ROOT / "tasks" / "level1" / "01_relu.py", candidate,
                               EvalOptions(device=args.real, timeout_s=300)).to_dict()
        else:
            time.sleep(eval_s)
            verdict = {"status": "correct", "speedup": 1.0 + (len(round_times) % 97) / 100,
                       "speedup_ci": [1.0, 1.1], "guards": [], "error": ""}
        eval_times.append(time.perf_counter() - t0)
        statuses.append(verdict["status"])
        return verdict

    with OpenAIStub(responder=responder) as stub, tempfile.TemporaryDirectory() as tmp:
        cfg = RunConfig(rounds=args.rounds, population=1, islands=4, eval_workers=1, concurrency=1,
                        device=args.real or "cpu",
                        run_dir=Path(tmp), models=[{"name": "stub", "base_url": stub.base_url}])
        store = RunStore(Path(tmp) / "run.db")
        store.create_run(cfg.model_dump(mode="json"), run_id=RUN_ID)
        proposer = _answers(store, make_proposer(cfg))
        progress = Progress(rounds=cfg.rounds)
        engine = Engine(cfg, Ledger(store), RUN_ID, "relu", "reference", proposer, judge, {}, None, progress)
        original = engine._child

        async def timed(round_: int, index: int):  # noqa: ANN202
            t0 = time.perf_counter()
            out = await original(round_, index)
            round_times.append(time.perf_counter() - t0)
            return out

        engine._child = timed

        async def run() -> None:
            try:
                await engine.run()
            finally:
                await proposer.aclose()

        asyncio.run(run())
    if len(eval_times) != len(round_times):
        sys.exit(f"{len(round_times)} rounds but {len(eval_times)} evaluations: some proposals were not evaluated")
    over = [t - e for t, e in zip(round_times, eval_times)]
    k = min(len(over), max(10, len(over) // 10))
    first, last = statistics.median(over[:k]), statistics.median(over[-k:])
    result = {"python": platform.python_version(), "rounds": args.rounds, "referee": args.real or "stand-in",
              "eval_ms_median": statistics.median(eval_times) * 1e3,
              "overhead_ms_first": first * 1e3, "overhead_ms_last": last * 1e3,
              "overhead_ms_median": statistics.median(over) * 1e3,
              "overhead_share_pct": 100 * sum(over) / sum(eval_times), "statuses": statuses,
              "stored_programs": len(round_times), "includes": "HTTP round trip to a local stub server"}
    if args.real:
        import torch

        result.update(torch=torch.__version__, device=torch.cuda.get_device_name() if args.real == "cuda" else "cpu")
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
