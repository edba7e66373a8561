"""Kill-and-resume trials of `kernelsmith.workshop.run.evolve`, each compared program by program with an
uninterrupted run of the same settings (run by `tests/test_resume.py`; not a test module itself).

    python tests/resume_driver.py --base-url URL --proposer llm --population 4 --islands 2 --trials 8 --out DIR

One uninterrupted run is made first; then every trial starts the same run afresh and SIGKILLs it right after
its k-th database write (k drawn at random over the whole run, so kill points fall in proposals, duplicate
checks, evaluations, round ends and the seed), sometimes kills the resume too, and resumes until it finishes.
Replay is tried on the uninterrupted run. Each run is a forked child of this process (imports paid once); the
model is a real HTTP server (the test's) that answers by the request's sampling seed, so siblings sharing a
prompt get different answers, and the referee is a deterministic stand-in (this is about the run record, not
about judging). Prints one JSON object: the trials and every difference found.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelsmith.candidate import Candidate  # noqa: E402
from kernelsmith.workshop.config import ModelConfig, RunConfig  # noqa: E402
from kernelsmith.workshop.run import evolve  # noqa: E402
from kernelsmith.workshop.store import RunStore  # noqa: E402

TASK = ROOT / "tests" / "candidates" / "task_relu.py"
WRITES = ("create_run", "add_answer", "add_prompt", "add_program", "add_verdict", "mark_pending", "clear_pending",
          "set_counters", "set_answer_outcome", "log_event", "set_run_status")


def judge(candidate: Candidate) -> dict[str, Any]:
    """A referee stand-in: a verdict that depends only on the code (and takes a few ms, so work interleaves)."""
    h = hashlib.sha256(candidate.source.encode()).digest()
    time.sleep(h[0] % 16 / 1000)
    try:
        compile(candidate.source, "candidate.py", "exec")
    except SyntaxError as exc:
        return {"status": "compile_error", "correct": False, "error": f"SyntaxError: {exc.msg}", "guards": []}
    if "WRONG" in candidate.source:
        return {"status": "incorrect", "correct": False, "error": "output mismatch", "max_abs_err": 1.0,
                "guards": []}
    s = 0.5 + int.from_bytes(h[1:3], "big") / 65536 * 1.5
    return {"status": "correct", "correct": True, "speedup": round(s, 4),
            "speedup_ci": [round(s * 0.99, 4), round(s * 1.01, 4)], "ref_ms": 1.0, "cand_ms": round(1 / s, 4),
            "max_abs_err": 0.0, "max_rel_err": 0.0, "guards": []}


def config(args: argparse.Namespace, run_dir: Path) -> RunConfig:
    extra = {"max_total_tokens": args.max_tokens} if args.max_tokens else {}
    return RunConfig(
        task=TASK, rounds=args.rounds, population=args.population, islands=args.islands, migration_interval=2,
        device="cpu", proposer=args.proposer, seed=11, run_dir=run_dir, eval_workers=3, concurrency=4,
        request_timeout_s=10, max_retries=2, inspirations=2,
        models=[ModelConfig(name="stub-model", base_url=args.base_url, price_in_per_mtok=1.0,
                            price_out_per_mtok=2.0)], **extra)


def _arm(kill_at: int | None, counter_file: Path | None) -> None:
    """In a child: count database writes; SIGKILL this process right after write number `kill_at`."""
    n = 0
    for name in WRITES:
        original = getattr(RunStore, name)

        def wrapped(self: RunStore, *a: Any, _original: Any = original, **kw: Any) -> Any:
            nonlocal n
            out = _original(self, *a, **kw)
            n += 1
            if counter_file is not None:
                counter_file.write_text(str(n))
            if kill_at is not None and n >= kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        setattr(RunStore, name, wrapped)


def _child_body(cfg: RunConfig, resume: bool, replay: Path | None, kill_at: int | None,
                counter_file: Path | None) -> int:
    try:
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the child's own, gone at exit
        _arm(kill_at, counter_file)
        evolve(cfg, resume=resume, replay=replay, judge=judge)
        return 0
    except BaseException as exc:  # noqa: BLE001 - reported to the parent through the exit code
        Path(str(cfg.run_dir) + ".error").write_text(f"{type(exc).__name__}: {exc}")
        return 3


def _outcome(cfg: RunConfig, killed: bool, code: int | None, status: object) -> str:
    if killed:
        return "killed"
    if code == 0:
        return "finished"
    err = Path(str(cfg.run_dir) + ".error")
    return "failed: " + (err.read_text() if err.exists() else f"status {status}")


def run_child(cfg: RunConfig, *, resume: bool = False, replay: Path | None = None, kill_at: int | None = None,
              counter_file: Path | None = None) -> str:
    """evolve() in a forked child of this (single-purpose) process; "finished", "killed" or "failed: ..."."""
    pid = os.fork()
    if pid == 0:
        os._exit(_child_body(cfg, resume, replay, kill_at, counter_file))
    _, status = os.waitpid(pid, 0)
    killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    return _outcome(cfg, killed, os.WEXITSTATUS(status) if os.WIFEXITED(status) else None, status)


def spawn_child(cfg: RunConfig, *, resume: bool = False, kill_at: int | None = None, counter_file: Path | None = None,
                timeout_s: float = 600.0) -> str:
    """`run_child` in a fresh interpreter, for callers inside a long-lived process (pytest): a fork of a process
    that earlier work left with threads (pools, torch) can deadlock in the child. Past `timeout_s` the child is
    killed and "failed: timed out" comes back, so a stuck run fails its test instead of hanging the suite."""
    import subprocess

    job = {"cfg": cfg.model_dump(mode="json"), "resume": resume, "kill_at": kill_at,
           "counter": str(counter_file) if counter_file else None}
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--child", json.dumps(job)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return f"failed: timed out after {timeout_s:.0f} s"
    return _outcome(cfg, code == -signal.SIGKILL, code, code)


def record(run_dir: Path) -> dict[str, Any]:
    """Everything a run recorded that must not depend on whether it was interrupted."""
    with sqlite3.connect(run_dir / "run.db") as conn:
        names = dict(conn.execute("select id, name from programs"))
        programs = sorted(
            (name, digest, names.get(parent), island, rnd, status, speedup)
            for name, digest, parent, island, rnd, status, speedup in conn.execute(
                "select p.name, p.digest, p.parent_id, p.island, p.round, v.status, v.speedup "
                "from programs p left join verdicts v on v.program_id = p.id"))
        answers = sorted(conn.execute("select child, prompt_hash, model, text, outcome from answers"))
        prompts = sorted(set(conn.execute("select child, hash from prompts")))
        pending = conn.execute("select count(*) from pending").fetchone()[0]
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    keep = ("rounds_done", "best_id", "best_status", "best_speedup", "programs", "evaluated", "correct_in_archive",
            "duplicates", "unusable_responses", "tokens", "cost_usd", "stopped", "archive_digest")
    return {"programs": [list(p) for p in programs], "answers": [list(a) for a in answers],
            "prompts": [list(p) for p in prompts], "pending": pending,
            "summary": {k: summary.get(k) for k in keep}}


def differences(a: dict[str, Any], b: dict[str, Any], budget: bool = False) -> list[str]:
    """What differs between the uninterrupted run `a` and the resumed `b`. Under a budget the round in which it
    runs out depends on which requests were in flight (timing, in either run), so only the rounds both finished
    are compared, and the spending must stay within the budget as the uninterrupted run's did."""
    out = []
    if budget:
        done = min(a["summary"]["rounds_done"], b["summary"]["rounds_done"])
        a = {**a, "programs": [p for p in a["programs"] if p[4] < done], "answers": [], "prompts": []}
        b = {**b, "programs": [p for p in b["programs"] if p[4] < done], "answers": [], "prompts": []}
        if "BudgetExhausted" not in (b["summary"]["stopped"] or ""):
            out.append(f"the resumed run did not stop on its budget: {b['summary']}")
        if b["summary"]["rounds_done"] > a["summary"]["rounds_done"] + 1:
            out.append(f"the resumed run went on for {b['summary']['rounds_done']} rounds, "
                       f"the uninterrupted one for {a['summary']['rounds_done']}")
    for part in ("programs", "answers", "prompts"):
        sa, sb = {json.dumps(x) for x in a[part]}, {json.dumps(x) for x in b[part]}
        out += [f"{part}: only uninterrupted: {x[:160]}" for x in sorted(sa - sb)[:5]]
        out += [f"{part}: only resumed: {x[:160]}" for x in sorted(sb - sa)[:5]]
    if b["pending"]:
        out.append(f"{b['pending']} evaluations still pending")
    for k, v in a["summary"].items():
        if budget:
            break
        w = b["summary"].get(k)
        if (round(v, 6) if isinstance(v, float) else v) != (round(w, 6) if isinstance(w, float) else w):
            out.append(f"summary {k}: {v!r} uninterrupted, {w!r} resumed")
    return out


def main() -> None:
    if sys.argv[1:2] == ["--child"]:  # spawn_child's fresh interpreter
        job = json.loads(sys.argv[2])
        counter = Path(job["counter"]) if job["counter"] else None
        os._exit(_child_body(RunConfig.model_validate(job["cfg"]), job["resume"], None, job["kill_at"], counter))
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--proposer", default="llm", choices=["llm", "mixed"])
    ap.add_argument("--population", type=int, default=4)
    ap.add_argument("--islands", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=0, help="a token budget for the run (0: none)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    out: dict[str, Any] = {"trials": [], "differences": {}}

    ref_dir = args.out / "uninterrupted"
    count = args.out / "writes"
    status = run_child(config(args, ref_dir), counter_file=count)
    if status != "finished":
        print(json.dumps({"error": f"uninterrupted run: {status}"}))
        return
    reference = record(ref_dir)
    writes = int(count.read_text())
    out["writes"] = writes
    out["uninterrupted"] = reference["summary"]

    for t in range(args.trials):
        run_dir = args.out / f"trial{t}"
        kills = [rng.randint(1, writes)]
        if rng.random() < 0.3:  # the resume is killed too
            kills.append(rng.randint(1, max(1, writes // 2)))
        steps = []
        resume = False
        for k in kills:
            steps.append(run_child(config(args, run_dir), resume=resume, kill_at=k))
            resume = resume or (run_dir / "run.db").exists()
        while steps[-1] == "killed":  # resume until it finishes
            if len(steps) > 6:
                break
            steps.append(run_child(config(args, run_dir), resume=(run_dir / "run.db").exists()))
        out["trials"].append({"trial": t, "kill_after_writes": kills, "steps": steps,
                              "summary": record(run_dir)["summary"] if steps[-1] == "finished" else None})
        if steps[-1] != "finished":
            out["differences"][f"trial{t}"] = [f"did not finish: {steps[-1]}"]
            continue
        diff = differences(reference, record(run_dir), budget=bool(args.max_tokens))
        if diff:
            out["differences"][f"trial{t}"] = diff

    if args.max_tokens:  # a replay spends nothing, so it is not bounded by the budget: nothing to compare
        print(json.dumps(out))
        return
    replay_dir = args.out / "replay"
    status = run_child(config(args, replay_dir), replay=ref_dir)
    replayed = record(replay_dir) if status == "finished" else None
    if replayed is None:
        out["differences"]["replay"] = [f"replay: {status}"]
    else:
        # A replay spends nothing; everything else, program by program, is the recorded run's.
        diff = [d for d in differences(reference, replayed)
                if not d.startswith(("summary tokens", "summary cost_usd"))]
        if replayed["summary"]["tokens"] != 0:
            diff.append(f"replay counted {replayed['summary']['tokens']} tokens as spent")
        if diff:
            out["differences"]["replay"] = diff
    print(json.dumps(out))


if __name__ == "__main__":
    main()
