"""`evaluate(task, candidate) -> Verdict`: the referee's one public operation.

Runs the reference and the candidate in two separate children (in parallel), compares their outputs here,
then — on a GPU and only for a correct candidate — lets the candidate's child time it against the reference
and compares once more on a fresh input set. The candidate's process never holds a reference output that
is used to judge it.
"""

from __future__ import annotations

import json
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelsmith.backends import BACKEND_NAMES, get_backend
from kernelsmith.candidate import Candidate
from kernelsmith.referee.compare import compare_outputs, degenerate_reason
from kernelsmith.referee.lease import LeaseHolder
from kernelsmith.referee.policy import POLICIES
from kernelsmith.referee.sandbox import Child, ChildOutcome, Limits, redact, secret_values
from kernelsmith.referee.verdict import Finding, Severity, Status, Verdict
from kernelsmith.task import Task

DEVICES = ("cuda", "cpu")


@dataclass
class EvalOptions:
    device: str = "cuda"
    policy: str = "strict"
    timeout_s: float = 300.0  # bounds the whole evaluation
    trials: int = 5  # random input sets, plus the task's get_test_inputs() cases
    test_inputs: bool = True
    poison: bool = True
    tolerance: float | None = None  # overrides the per-dtype default (see compare.py)
    timing: dict[str, Any] = field(default_factory=dict)  # TimingOptions fields
    limits: Limits = field(default_factory=Limits)
    keep_dir: bool = False  # keep the children's work dirs (for debugging)
    implausible_margin: float = 0.8  # flag cand_ms below this fraction of the memory-bandwidth floor
    max_hidden_work_ms: float = 0.1
    require_kernel: bool = True  # False only for A/A benchmarks, where the candidate is the reference's code
    gpu: int | None = None  # pin both children to this device index (a worker pool's choice)
    lease: Any = None  # a `GpuLease` shared by the evaluations on that GPU: timing runs alone (pool.py)
    backend: str = "triton"  # kernelsmith.backends: triton | cuda
    compile_timeout_s: float = 240.0  # a backend's build step (CUDA: nvcc), within timeout_s
    build_cache_dir: str | None = None  # built extensions by source digest (default ~/.cache/kernelsmith/...)

    def validate(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device {self.device!r}: expected one of {', '.join(DEVICES)}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy {self.policy!r}: expected one of {', '.join(POLICIES)}")
        if self.trials < 1:
            raise ValueError(f"trials {self.trials}: need at least 1")
        if self.backend not in BACKEND_NAMES:
            raise ValueError(f"backend {self.backend!r}: expected one of {', '.join(BACKEND_NAMES)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout {self.timeout_s}: must be positive")


def _load_tensors(path: Path) -> list[torch.Tensor]:
    # weights_only: the file was written by a child that may run hostile code; never unpickle objects from it
    return torch.load(path, map_location="cpu", weights_only=True)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _job(role: str, task: Task, opts: EvalOptions, seeds: dict[str, Any]) -> dict[str, Any]:
    """A child's job file. The candidate's holds no seeds: those reach it on stdin, when they are needed."""
    job = {"role": role, "device": opts.device, "policy": opts.policy, "poison": opts.poison,
           "test_inputs": opts.test_inputs and task.has_test_inputs, "tolerance": opts.tolerance,
           "timing": opts.timing, "require_kernel": opts.require_kernel, "backend": opts.backend}
    return {**job, **seeds} if role == "reference" else job


CORRECTNESS_SEEDS = ("init_seed", "trial_seeds", "test_seed")
TIMING_SEEDS = ("check_seed", "timing_seed")


def _prepare(root: Path, name: str, job: dict[str, Any], task: Task, candidate: Candidate | None) -> Path:
    d = root / name
    d.mkdir(mode=0o700)  # the reference's dir stays closed to a candidate running as another user
    (d / "task.py").write_text(task.source)
    if candidate is not None:
        (d / "candidate.py").write_text(candidate.source)
    (d / "job.json").write_text(json.dumps(job))
    return d


class _Judge:
    """Accumulates one evaluation's findings and decides the status."""

    def __init__(self, opts: EvalOptions, secrets_: list[str]):
        self.opts = opts
        self.secrets = secrets_
        self.v = Verdict(status=Status.CORRECT, device=opts.device)
        self.t0 = self._last = time.monotonic()
        self.hold: LeaseHolder | None = None

    def phase(self, name: str) -> None:
        """Record the wall time since the previous phase (verdict.timing["phases_s"]): where evaluations spend."""
        now = time.monotonic()
        self.v.timing.setdefault("phases_s", {})[name] = round(now - self._last, 3)
        self._last = now

    def finding(self, name: str, message: str, severity: Severity = Severity.REJECT) -> None:
        if not self.v.finding(name):
            self.v.guards.append(Finding(name, message, severity))

    def merge(self, reported: list[dict[str, Any]]) -> None:
        """Add findings a child reported (as `Finding.to_dict()` dicts)."""
        for f in map(Finding.from_dict, reported):
            self.finding(f.name, f.message, f.severity)

    def end(self, status: Status | None = None, error: str = "", log: str = "") -> Verdict:
        v = self.v
        if status is None:
            severities = {g.severity for g in v.guards}
            status = (Status.REJECTED if Severity.REJECT in severities
                      else Status.INCORRECT if Severity.FAIL in severities else Status.CORRECT)
        log, leaked = redact(log, self.secrets)
        error, leaked2 = redact(error, self.secrets)
        if leaked or leaked2:
            self.finding("secret_leak", "candidate output contained a secret of the parent's environment")
            status = Status.REJECTED
        v.status, v.log, v.elapsed_s = status, log, round(time.monotonic() - self.t0, 3)
        if not error and status is not Status.CORRECT:
            bad = [g for g in v.guards if g.severity is not Severity.WARN]
            error = bad[0].message if bad else status.value
        v.error = error
        if status is not Status.CORRECT:
            v.speedup = v.speedup_ci = v.cand_ms = None
        return v


def _failure(outcome: ChildOutcome | None, err: dict[str, Any] | None, role: str) -> tuple[Status, str]:
    if outcome is not None and outcome.timed_out:
        return Status.TIMEOUT, f"{role} ran past the evaluation's time limit"
    if outcome is not None and outcome.memory_exceeded:
        return Status.CRASHED, f"{role} exceeded its memory limit ({outcome.peak_rss_mb:.0f} MB resident)"
    if err:
        kind = err.get("kind", "runtime")
        status = {"compile": Status.COMPILE_ERROR, "crash": Status.CRASHED}.get(kind, Status.RUNTIME_ERROR)
        where = {"import": "importing the candidate", "init": "constructing ModelNew",
                 "forward": "running forward", "timing": "timing"}.get(err.get("stage", ""), err.get("stage", ""))
        return status, f"{err.get('type')} while {where}: {err.get('message', '')}".strip()
    if outcome is not None and outcome.signal_name:
        return Status.CRASHED, f"{role} process died with {outcome.signal_name}"
    code = outcome.returncode if outcome else None
    return Status.CRASHED, f"{role} process exited with code {code} before reporting"


def evaluate(task: Task | str | Path, candidate: Candidate | str | Path, opts: EvalOptions | None = None,
             overrides: dict[str, Any] | None = None) -> Verdict:
    """Judge `candidate` against `task`. Bad task input raises `TaskError`; everything else is a verdict."""
    opts = opts or EvalOptions()
    opts.validate()
    if not isinstance(task, Task):
        task = Task.load(task, overrides, device=opts.device)
    if not isinstance(candidate, Candidate):
        candidate = Candidate.from_file(candidate)
    judge = _Judge(opts, secret_values())
    seeds = {"init_seed": 42, "trial_seeds": [secrets.randbits(31) for _ in range(opts.trials)],
             "test_seed": secrets.randbits(31), "check_seed": secrets.randbits(31),
             "timing_seed": secrets.randbits(20) * 64}
    root = Path(tempfile.mkdtemp(prefix="kernelsmith-eval-"))
    deadline = time.monotonic() + opts.timeout_s
    ref_child = cand_child = None
    try:
        ref_dir = _prepare(root, "reference", _job("reference", task, opts, seeds), task, None)
        cand_dir = _prepare(root, "candidate", _job("candidate", task, opts, seeds), task, candidate)
        if opts.backend != "triton":
            early = _build(task, candidate, opts, judge, cand_dir, deadline)
            if early is not None:
                return early
        judge.hold = LeaseHolder(opts.lease)
        ref_child = Child.start(ref_dir, opts.device, opts.limits, untrusted=False, gpu=opts.gpu)
        cand_child = Child.start(cand_dir, opts.device, opts.limits, gpu=opts.gpu)
        return _run(task, opts, judge, ref_child, cand_child, ref_dir, cand_dir, deadline, seeds)
    finally:
        if judge.hold is not None:
            judge.hold.release()
        for child in (ref_child, cand_child):
            if child is not None and child.proc.poll() is None:
                child.kill()
        if not opts.keep_dir:
            shutil.rmtree(root, ignore_errors=True)


def _build(task: Task, candidate: Candidate, opts: EvalOptions, judge: _Judge, cand_dir: Path,
           deadline: float) -> Verdict | None:
    """A backend's build step, before any child runs candidate code: a verdict when it ends the evaluation
    (a compile error; on `--device cpu`, where a CUDA build cannot run, after saying whether it compiled)."""
    backend = get_backend(opts.backend)
    res = backend.build(candidate.source, device=opts.device, deadline=deadline, cache_dir=opts.build_cache_dir,
                        gpu=opts.gpu, limits=opts.limits, compile_timeout_s=opts.compile_timeout_s)
    judge.v.timing["build"] = res.info
    judge.phase("build")
    if not res.ok:
        return judge.end(Status.COMPILE_ERROR, res.error, res.log)
    if opts.device == "cpu":
        what = "compiled (compile-only: torch here has no CUDA)" if res.info.get("mode") == "objects" else "built"
        cached = ", from the build cache" if res.info.get("cached") else ""
        return judge.end(Status.RUNTIME_ERROR, f"CUDA extension(s) {', '.join(res.info.get('extensions', []))} "
                         f"{what}{cached}; CUDA candidates need a GPU to run: evaluate with --device cuda")
    job = json.loads((cand_dir / "job.json").read_text())
    ext_dir = cand_dir / "cache" / "ext"
    ext_dir.mkdir(parents=True, exist_ok=True)
    job["cuda_extensions"] = []
    for ext in res.extensions:
        if not ext.get("so"):
            return judge.end(Status.COMPILE_ERROR, f"CUDA extension {ext['name']!r}: the build produced no module")
        shutil.copy2(ext["so"], ext_dir / f"{ext['name']}.so")  # a copy: the candidate never sees the cache
        job["cuda_extensions"].append({**{k: ext[k] for k in ("name", "digest", "functions")},
                                       "file": f"cache/ext/{ext['name']}.so"})
    (cand_dir / "job.json").write_text(json.dumps(job))
    return None


def _run(task: Task, opts: EvalOptions, judge: _Judge, ref_child: Child, cand_child: Child,
         ref_dir: Path, cand_dir: Path, deadline: float, seeds: dict[str, Any]) -> Verdict:
    v = judge.v
    # The candidate's child starts up meanwhile but runs no candidate code until the reference's outputs
    # are loaded here and deleted from disk.
    ref_out = ref_child.finish(deadline)
    judge.phase("reference")
    ref_res = _read_json(ref_dir / "result.json")
    if ref_res is None:
        cand_child.kill()
        status, msg = _failure(ref_out, _read_json(ref_dir / "error.json"), "reference")
        if status is Status.TIMEOUT:
            return judge.end(status, msg, ref_child.log())
        return judge.end(Status.CRASHED, f"the task's reference failed: {msg}", ref_child.log())
    v.versions, v.device = ref_res["versions"], ref_res["device"]
    refs = {name: _load_tensors(ref_dir / "out" / f"{name}.pt") for name in ref_res["cases"]}
    shutil.rmtree(ref_dir / "out", ignore_errors=True)
    judge.phase("load_reference")
    cand_child.send("go " + json.dumps({k: seeds[k] for k in CORRECTNESS_SEEDS}))
    reason = degenerate_reason(refs["trial0"])
    if reason:
        judge.finding("degenerate_task", f"task outputs are degenerate, a trivial output may pass: {reason}",
                      Severity.WARN)

    outcome = cand_child.wait_for(cand_dir / "phase1.json", deadline)
    phase1 = _read_json(cand_dir / "phase1.json")
    judge.phase("candidate_correctness")
    if phase1 is None:
        return _child_failed(judge, outcome, cand_dir, cand_child)
    v.ops, v.kernels = phase1.get("ops", {}), phase1.get("kernels", {})
    v.sandbox = phase1.get("sandbox", {})
    if v.sandbox.get("uid") == 0:
        judge.finding("unsandboxed", "the candidate ran as root (its Python is not readable by `nobody`): "
                      "Python-level access to other files is refused, but native code could still reach them; "
                      "run kernelsmith as a non-root user or from a world-readable Python", Severity.WARN)
    judge.merge(phase1.get("findings", []))
    if any(g.severity is Severity.REJECT for g in v.guards):
        cand_child.kill()
        return judge.end(None, log=cand_child.log())

    _check_cases(judge, refs, ref_res, cand_dir, phase1, opts)
    judge.phase("compare")
    if opts.device != "cuda" or any(g.severity is not Severity.WARN for g in v.guards):
        cand_child.send("stop")
        cand_child.finish(deadline)
        return judge.end(None, log=cand_child.log())

    judge.hold.exclusive()  # waits until no other evaluation works on this GPU
    judge.phase("lease_wait")
    cand_child.send("time " + json.dumps({k: seeds[k] for k in TIMING_SEEDS}))
    outcome = cand_child.wait_for(cand_dir / "phase2.json", deadline)
    phase2 = _read_json(cand_dir / "phase2.json")
    if phase2 is None:
        return _child_failed(judge, outcome, cand_dir, cand_child)
    cand_child.finish(deadline)
    judge.phase("candidate_timing")
    _judge_timing(judge, phase2, refs, ref_res, cand_dir, opts)
    judge.phase("judge_timing")
    return judge.end(None, log=cand_child.log())


def _child_failed(judge: _Judge, outcome: ChildOutcome | None, cand_dir: Path, child: Child) -> Verdict:
    """The candidate's child ended without its report: a guard's refusal, an error, a crash or the deadline."""
    err = _read_json(cand_dir / "error.json")
    status, msg = _failure(outcome, err, "candidate")
    judge.merge((err or {}).get("findings", []))
    if any(g.severity is Severity.REJECT for g in judge.v.guards):
        return judge.end(Status.REJECTED, "", child.log())
    return judge.end(status, msg, child.log())


def _check_cases(judge: _Judge, refs: dict[str, list[torch.Tensor]], ref_res: dict[str, Any], cand_dir: Path,
                 phase1: dict[str, Any], opts: EvalOptions) -> None:
    """Compare every case the candidate ran; name the first failure by the check that caught it."""
    v = judge.v
    if "trial0" in phase1["cases"] and "trial0_repeat" in phase1["cases"]:
        first = _load_tensors(cand_dir / "out" / "trial0.pt")
        repeat = compare_outputs(_load_tensors(cand_dir / "out" / "trial0_repeat.pt"), first, opts.tolerance)
        if not repeat.ok:
            judge.finding("poisoned_memory", "two runs on the same input disagree with differently poisoned "
                          f"output memory (it reads memory it did not write): {repeat.reason}", Severity.FAIL)
            return
    outs: dict[str, list[torch.Tensor]] = {}
    for run_name, info in phase1["cases"].items():
        case = run_name.removesuffix("_repeat")
        out = _load_tensors(cand_dir / "out" / f"{run_name}.pt")
        outs[run_name] = out
        if info["fingerprint"] != ref_res["cases"][case]["fingerprint"]:
            judge.finding("input_generation", f"{case}: the candidate's process generated different inputs "
                          "from the reference's for the same seed (input generation or torch's RNG altered)")
            return
        if not info["inputs_unchanged"]:
            judge.finding("input_mutated", f"forward changed its inputs in place ({case})", Severity.FAIL)
            return
        cmp = compare_outputs(out, refs[case], opts.tolerance)
        v.max_abs_err = max(v.max_abs_err or 0.0, cmp.max_abs_err)
        v.max_rel_err = max(v.max_rel_err or 0.0, cmp.max_rel_err)
        if cmp.ok:
            v.trials += 0 if run_name.endswith("_repeat") else 1
            continue
        if cmp.kind == "structure":
            name, what = "output_structure", "wrong output structure"
        elif cmp.kind == "nonfinite":
            name, what = "nonfinite_output", "NaN/Inf where the reference has none"
        else:
            earlier = [c for c in refs if c != case and c in outs and compare_outputs(out, refs[c]).ok]
            if earlier:
                name, what = "cached_result", f"returned the result for an earlier input ({earlier[0]})"
            else:
                name, what = "output_mismatch", "outputs differ from the reference"
        judge.finding(name, f"{case}: {what}: {cmp.reason}", Severity.FAIL)
        return


def _judge_timing(judge: _Judge, phase2: dict[str, Any], refs: dict[str, list[torch.Tensor]],
                  ref_res: dict[str, Any], cand_dir: Path, opts: EvalOptions) -> None:
    v = judge.v
    judge.merge(phase2.get("findings", []))
    t = phase2["timing"]
    v.ref_ms, v.cand_ms = round(t["ref_ms"], 6), round(t["cand_ms"], 6)
    v.speedup = round(t["speedup"], 4)
    v.speedup_ci = [round(x, 4) for x in t["speedup_ci"]]
    v.timing.update({k: t[k] for k in ("method", "reps", "ref_spread", "cand_spread", "hidden_work_ms")})
    v.timing["bandwidth_gbs"] = round(phase2["bandwidth"] / 1e9, 1)
    if "sample_ci" in t["extra"]:  # the bootstrap alone; speedup_ci adds the between-process floor
        v.timing["sample_ci"] = [round(x, 4) for x in t["extra"]["sample_ci"]]
    if t["canary_failures"]:
        judge.finding("cached_result", f"{t['canary_failures']} timed calls returned outputs that do not match "
                      "the reference on the same inputs (results cached across calls?)", Severity.FAIL)
    if t["hidden_work_ms"] > max(opts.max_hidden_work_ms, 0.5 * t["cand_ms"]):
        judge.finding("hidden_stream_work", f"device-synchronised wall time exceeds the timed events by "
                      f"{t['hidden_work_ms']:.3f} ms per call: work on another stream or thread")
    floor_ms = ref_res["cases"]["trial0"]["bytes"] / phase2["bandwidth"] * 1e3
    v.timing["bandwidth_floor_ms"] = round(floor_ms, 6)
    cacheable = not t["method"].startswith("eager") and ref_res["cases"]["trial0"]["bytes"] < 2 * t["extra"]["l2_bytes"]
    if not cacheable and t["cand_ms"] < opts.implausible_margin * floor_ms:
        judge.finding("implausible_speedup", f"{t['cand_ms']:.4f} ms is faster than moving its inputs and "
                      f"outputs once at {phase2['bandwidth'] / 1e9:.0f} GB/s allows ({floor_ms:.4f} ms)")
    check = cand_dir / "out" / "check.pt"
    if not check.exists():
        return
    if phase2["check_fingerprint"] != ref_res["cases"]["check"]["fingerprint"]:
        judge.finding("input_generation", "check: the candidate's process generated different inputs from the "
                      "reference's for the same seed (input generation or torch's RNG altered)")
    if not phase2["check_inputs_unchanged"]:
        judge.finding("input_mutated", "forward changed its inputs in place (after timing)", Severity.FAIL)
    cmp = compare_outputs(_load_tensors(check), refs["check"], opts.tolerance)
    if not cmp.ok:
        judge.finding("changed_after_timing", f"wrong on a fresh input after timing: {cmp.reason}", Severity.FAIL)
    else:
        v.trials += 1
