"""`evaluate(task, candidate) -> Verdict`: the referee's one public operation (the orchestrator's side).

Starts two sandboxes (sandbox.py): the judge (task code: reference, seeds, comparison) and the candidate, joined
by a link the orchestrator made; the orchestrator talks only to the ruling, holds the deadline, watches both
processes from outside and kills them. It decides the status from what the judge observed and from how the
processes ended; what the candidate says of itself (its guard report, its claimed times) is checked against
those facts and can only make its verdict worse.
"""

from __future__ import annotations

import queue
import secrets
import socket
import threading
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field

from kernelsmith.backends import get_backend
from kernelsmith.candidate import Candidate
from kernelsmith.referee import channel
from kernelsmith.referee.lease import GpuLease, LeaseHolder, lease_for
from kernelsmith.referee.sandbox import (
    NOBODY,
    Child,
    ChildOutcome,
    Limits,
    redact,
    secret_values,
    visible_device,
    zygote_for,
)
from kernelsmith.referee.verdict import Finding, Severity, Status, Verdict
from kernelsmith.settings import DEVICES, EvalSettings
from kernelsmith.task import Task

__all__ = ["DEVICES", "EvalOptions", "evaluate"]


class EvalOptions(EvalSettings):
    """The settings of one evaluation (`kernelsmith.settings.EvalSettings`, what a caller may choose) plus what
    the pool or the caller's process decides: GPU, timing lease, limits, spares. Validated when made; a bad
    value is a `ValueError` naming the setting."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=True)
    poison: bool = True
    limits: Limits = Field(default_factory=Limits)
    implausible_margin: float = 0.8  # flag cand_ms below this fraction of the memory-bandwidth floor
    max_hidden_work_ms: float = 0.1
    gpu: int | None = None  # pin both children to this device index (a worker pool's choice)
    lease: Any = None  # a `GpuLease` shared by the evaluations on that GPU: timing runs alone (pool.py)
    build_cache_dir: str | None = None  # built extensions by source digest (default ~/.cache/kernelsmith/...)
    warm: int = Field(0, ge=0)  # sandboxes kept started ahead for later evaluations like this one

    def validate(self) -> None:  # type: ignore[override]
        """Check the current values again (fields may have been set after construction)."""
        type(self).model_validate(self.model_dump())

    @classmethod
    def of(cls, settings: EvalSettings, **placement: Any) -> EvalOptions:
        return cls(**settings.model_dump(), **placement)


class _Ruling:
    """Accumulates one evaluation's findings and decides the status (the orchestrator's, from the facts)."""

    def __init__(self, opts: EvalOptions, secrets_: list[str]):
        self.opts = opts
        self.secrets = secrets_
        self.v = Verdict(status=Status.CORRECT, device=opts.device, precision=opts.precision, numerics=opts.numerics)
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

    def merge(self, reported: list[Any]) -> None:
        """Add findings a child reported (as `Finding.to_dict()` dicts); malformed entries are dropped."""
        for d in reported:
            try:
                f = Finding.from_dict(d)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            self.finding(str(f.name)[:100], str(f.message)[:2000], f.severity)

    def task_failed(self, status: Status, kind: str, error: str, log: str = "") -> Verdict:
        """The task's own code failed (its inputs, its reference): the verdict says so (`fault`), not as the
        candidate's doing."""
        self.v.fault, self.v.fault_kind = "task", kind
        return self.end(status, error, log)

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


JUDGE_UID = 65533  # the judge and the candidate run as different unprivileged users (when started as root)
TIMEOUT_ROLES = {"waiting": "candidate", "case_ok": "reference", "loaded": "reference",
                 "reference_ready": "reference", "checked": "candidate", "start": "reference"}


def _worker(role: str) -> list[str]:
    return ["-m", "kernelsmith.referee.worker", role]


class _Spares:
    """Sandboxes started ahead of need, each used for one evaluation only (a fresh process per candidate): an
    evaluation that finds one ready skips the interpreter's and torch's start-up. Spares are started by one
    long-lived thread, since a child dies with the thread that started it (PR_SET_PDEATHSIG)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[tuple, list[tuple[Child, socket.socket]]] = {}
        self._wanted: queue.Queue[tuple[tuple, str, EvalOptions]] = queue.Queue()
        self._thread: threading.Thread | None = None

    @staticmethod
    def key(role: str, opts: EvalOptions) -> tuple:
        return (role, opts.device, opts.gpu, astuple(opts.limits))

    def take(self, role: str, opts: EvalOptions, ro_files: dict[str, str] | None = None) -> tuple[Child, socket.socket]:
        """A ready sandbox for `role` (else one started now); `opts.warm` spares are kept for later."""
        key = self.key(role, opts)
        got = None
        if not ro_files:
            with self._lock:
                ready = self._ready.setdefault(key, [])
                while ready and got is None:
                    child, sock = ready.pop(0)
                    if child.proc.poll() is None:
                        got = (child, sock)
                    else:
                        child.close()
                        sock.close()
                missing = opts.warm - len(ready)
                if missing > 0 and self._thread is None:
                    self._thread = threading.Thread(target=self._starter, daemon=True, name="kernelsmith-spares")
                    self._thread.start()
            for _ in range(max(0, missing)):
                self._wanted.put((key, role, opts))
        return got or start_sandbox(role, opts, ro_files)

    def _starter(self) -> None:
        while True:
            key, role, opts = self._wanted.get()
            with self._lock:
                if len(self._ready.get(key, [])) >= opts.warm:
                    continue
            try:
                spare = start_sandbox(role, opts)
            except OSError:
                continue
            with self._lock:
                self._ready.setdefault(key, []).append(spare)


SPARES = _Spares()


class _Judges:
    """Judges kept between evaluations of the same task (its module loaded, its CUDA context made): the judge
    is trusted code plus the task's, so it may serve one candidate after another; each evaluation still gets
    fresh seeds, inputs and reference model. A judge goes back only after an evaluation it ended cleanly, and
    is taken again only once it says it is idle (it has freed that evaluation's memory)."""

    # Judges kept over all tasks (the least recently used go first): enough for a batch over a benchmark's tasks
    # (the shipped set is 15; with 8 a mixed batch over them met a kept judge for almost no evaluation).
    MAX_IDLE = 16

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[tuple[tuple, Child, socket.socket]] = []

    @staticmethod
    def key(task: Task, opts: EvalOptions) -> tuple:
        import hashlib

        return (hashlib.sha256(task.source.encode()).hexdigest(), *_Spares.key("judge", opts))

    def take(self, key: tuple, hold: LeaseHolder) -> tuple[Child, socket.socket] | None:
        while True:
            with self._lock:
                i = next((i for i, (k, _, _) in enumerate(self._idle) if k == key), None)
                if i is None:
                    return None
                _, child, ctl = self._idle.pop(i)
            try:
                end = time.monotonic() + 10.0
                while True:  # (10 s, plus any time it spends frozen for a neighbour's timing)
                    try:
                        msg = channel.recv(ctl, timeout=0.5)
                        break
                    except TimeoutError:
                        if time.monotonic() > end + hold.paused_s():
                            raise
                if msg.get("op") == "idle" and child.proc.poll() is None:
                    return child, ctl
            except (channel.ChannelError, TimeoutError):
                pass
            _discard(child, ctl)

    def give(self, key: tuple, child: Child, ctl: socket.socket, keep: int) -> bool:
        """Tell the judge its evaluation is over and keep it for the next (False: not kept, close it)."""
        try:
            channel.send(ctl, {"op": "end"})
        except channel.ChannelError:
            return False
        evicted = []
        with self._lock:
            if sum(k == key for k, _, _ in self._idle) >= max(1, keep):
                return False
            self._idle.append((key, child, ctl))
            while len(self._idle) > self.MAX_IDLE:
                evicted.append(self._idle.pop(0))
        for _, old, old_ctl in evicted:
            _discard(old, old_ctl)
        return True

    def pids(self) -> list[int]:
        with self._lock:
            return [child.proc.pid for _, child, _ in self._idle]


def _discard(judge: Child, ctl: socket.socket) -> None:
    ctl.close()
    judge.close()  # kills it first if it still runs


JUDGES = _Judges()


def standing_sandboxes() -> list[int]:
    """Process ids of the sandboxes this process keeps between evaluations (spares, kept judges): alive by
    design, unlike anything left of an evaluation that ended."""
    with SPARES._lock:
        spares = [child.proc.pid for ready in SPARES._ready.values() for child, _ in ready]
    return spares + JUDGES.pids()


def start_sandbox(role: str, opts: EvalOptions, ro_files: dict[str, str] | None = None) -> tuple[Child, socket.socket]:
    """A judge or candidate sandbox and the orchestrator's end of its channel: forked from the device's template
    where that is possible (as root), else started with bubblewrap. Each role has its own uid."""
    uid = JUDGE_UID if role == "judge" else NOBODY
    track = gpu_lease(opts).track if opts.device == "cuda" else None  # a neighbour's timing freezes it
    if not ro_files:
        zygote = zygote_for(opts.device, opts.gpu, opts.limits)
        if zygote is not None:
            try:
                return zygote.spawn(opts.device, opts.limits, uid, role=role, placed=track)
            except OSError:
                pass  # (the template's failure is in its log) a sandbox of its own, then
    mine, theirs = channel.pair()
    try:
        child = Child.start(_worker(role), opts.device, opts.limits, gpu=opts.gpu, pass_fds=(theirs.fileno(),),
                            uid=uid, ro_files=ro_files,
                            env={"KERNELSMITH_FD": str(theirs.fileno()), "KERNELSMITH_DEVICE": opts.device})
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()  # it lives in the child now
    if track is not None:
        track(child)
    return child, mine


def gpu_lease(opts: EvalOptions) -> GpuLease:
    """The timing lease of the evaluation's GPU: the pool's, else this process's."""
    return opts.lease or lease_for(lease_key(opts.gpu))


def lease_key(gpu: int | None) -> str:
    """A GPU's name across processes (its physical index, whatever CUDA_VISIBLE_DEVICES renumbers)."""
    return f"cuda-{visible_device(gpu or 0)}"


class _Session:
    """The two sandboxes of one evaluation and the orchestrator's end of the judge's channel. The candidate's
    channel is handed to the judge: from then on only the judge talks to the candidate."""

    def __init__(self, candidate: Candidate, opts: EvalOptions, ro_files: dict[str, str], config: dict[str, Any],
                 judge_key: tuple, hold: LeaseHolder):
        self.opts, self.judge_key, self.hold = opts, judge_key, hold
        self.judge = self.cand = None
        self.reusable = False  # the judge ended this evaluation cleanly and may judge the next candidate
        kept = JUDGES.take(judge_key, hold)
        self.judge, self.ctl = kept or SPARES.take("judge", opts)
        self.judge_reused = kept is not None
        try:
            self.cand, cand_sock = SPARES.take("candidate", opts, ro_files)
            try:
                channel.send(cand_sock, {"op": "config", "source": candidate.source, **config})
                channel.send(self.ctl, {"op": "link"}, [cand_sock.fileno()])
            finally:
                cand_sock.close()
        except BaseException:
            self.close()
            raise
        self.last = "start"  # the judge's last progress message: who is working now

    def recv(self, deadline: float) -> channel.Message | ChildOutcome:
        """The judge's next message, or why none will come (a child's end, the deadline, moved on by the time
        both sandboxes spent frozen for a neighbour's timing)."""
        while True:
            deadline_now = deadline + self.hold.paused_s()
            remaining = deadline_now - time.monotonic()
            try:
                msg = channel.recv(self.ctl, timeout=max(0.01, min(0.25, remaining)))
            except TimeoutError:
                for child in (self.judge, self.cand):
                    outcome = child.check(deadline_now)
                    if outcome is not None and (child is self.judge or outcome.timed_out
                                                or outcome.memory_exceeded):
                        return outcome
                continue
            except channel.ChannelError:
                return self.judge.wait(deadline_now)
            if msg.get("op") in TIMEOUT_ROLES:
                self.last = msg["op"]
            return msg

    def send(self, header: dict[str, Any]) -> None:
        try:
            channel.send(self.ctl, header)
        except channel.ChannelError:
            pass

    def stop(self, judge_done: bool = False) -> None:
        """Kill the candidate's sandbox (its log is complete once it is gone); the judge too, unless it ended
        the evaluation cleanly (`judge_done`: it waits for `end`, then for the next candidate)."""
        self.reusable = judge_done
        for child in (self.cand,) if judge_done else (self.judge, self.cand):
            if child is not None:
                child.kill()

    def close(self) -> None:
        if self.reusable and self.judge is not None and self.judge.proc.poll() is None and JUDGES.give(
                self.judge_key, self.judge, self.ctl, self.opts.warm):
            self.judge = None  # kept
        else:
            self.ctl.close()
            if self.judge is not None:
                self.judge.kill()
        for child in (self.judge, self.cand):
            if child is not None:
                child.close()


def evaluate(task: Task | str | Path, candidate: Candidate | str | Path, opts: EvalOptions | None = None,
             overrides: dict[str, Any] | None = None) -> Verdict:
    """Judge `candidate` against `task`. Bad task input raises `TaskError`; everything else is a verdict."""
    opts = opts or EvalOptions()
    opts.validate()
    if not isinstance(task, Task):
        task = Task.load(task, overrides, device=opts.device)
    if not isinstance(candidate, Candidate):
        candidate = Candidate.from_file(candidate)
    ruling = _Ruling(opts, secret_values())
    seeds = {"init_seed": 42, "trial_seeds": [secrets.randbits(31) for _ in range(opts.trials)],
             "test_seed": secrets.randbits(31), "check_seed": secrets.randbits(31),
             "timing_seed": secrets.randbits(20) * 64}
    deadline = time.monotonic() + opts.timeout_s
    session: _Session | None = None
    try:
        ro_files: dict[str, str] = {}
        config = {"policy": opts.policy, "require_kernel": opts.require_kernel, "backend": opts.backend,
                  "precision": opts.precision}
        if opts.backend != "triton":
            early = _build(candidate, opts, ruling, deadline, ro_files, config)
            if early is not None:
                return early
        started = time.monotonic()
        ruling.hold = LeaseHolder(gpu_lease(opts) if opts.device == "cuda" else None)
        session = _Session(candidate, opts, ro_files, config, _Judges.key(task, opts), ruling.hold)
        ruling.hold.own(session.judge, session.cand)
        deadline += time.monotonic() - started  # waiting for a timing neighbour and starting sandboxes: the
        # referee's time, not the candidate's (as is any time frozen for a neighbour's timing: `Session.recv`)
        ruling.v.sandbox = dict(session.cand.info)
        ruling.v.timing["judge"] = "kept" if session.judge_reused else "new"
        session.send({"op": "job", "task_source": task.source, "device": opts.device,
                      "tolerance": opts.tolerance, "test_inputs": opts.test_inputs and task.has_test_inputs,
                      "timing": opts.timing, "precision": opts.precision, "numerics": opts.numerics, **seeds})
        return _run(ruling, session, deadline)
    finally:
        if ruling.hold is not None:
            ruling.hold.release()
        if session is not None:
            session.close()


def _build(candidate: Candidate, opts: EvalOptions, ruling: _Ruling, deadline: float, ro_files: dict[str, str],
           config: dict[str, Any]) -> Verdict | None:
    """A backend's build step, before any child runs candidate code: a verdict when it ends the evaluation
    (a compile error; on `--device cpu`, where a CUDA build cannot run, after saying whether it compiled)."""
    backend = get_backend(opts.backend)
    res = backend.build(candidate.source, device=opts.device, deadline=deadline, cache_dir=opts.build_cache_dir,
                        gpu=opts.gpu, limits=opts.limits, compile_timeout_s=opts.compile_timeout_s)
    ruling.v.timing["build"] = res.info
    ruling.phase("build")
    if not res.ok:
        return ruling.end(Status.COMPILE_ERROR, res.error, res.log)
    if opts.device == "cpu":
        what = "compiled (compile-only: torch here has no CUDA)" if res.info.get("mode") == "objects" else "built"
        cached = ", from the build cache" if res.info.get("cached") else ""
        return ruling.end(Status.RUNTIME_ERROR, f"CUDA extension(s) {', '.join(res.info.get('extensions', []))} "
                         f"{what}{cached}; CUDA candidates need a GPU to run: evaluate with --device cuda")
    exts = []
    for ext in res.extensions:
        if not ext.get("so"):
            return ruling.end(Status.COMPILE_ERROR, f"CUDA extension {ext['name']!r}: the build produced no module")
        ro_files[f"{ext['name']}.so"] = ext["so"]  # bound read-only: the candidate never sees the cache
        exts.append({**{k: ext[k] for k in ("name", "digest", "functions")}, "file": f"{ext['name']}.so"})
    config["cuda_extensions"] = exts
    return None


STAGES = {"import": "importing the candidate", "init": "constructing ModelNew", "forward": "running forward",
          "timing": "timing"}


def _candidate_fault(ruling: _Ruling, session: _Session, fault: dict[str, Any], deadline: float) -> Verdict:
    """The candidate ended the conversation: its own error report, a protocol violation, or its death."""
    session.reusable = True  # the judge told the fault and waits for `end`
    if fault.get("op") != "gone":  # (a dead candidate's own end is read below)
        session.stop(judge_done=True)
    log = session.cand.log() if fault.get("op") != "gone" else ""
    if fault.get("op") == "violation":
        ruling.finding("protocol_violation", f"the candidate broke the judge's protocol: {fault.get('message', '')}")
        return ruling.end(Status.REJECTED, "", log)
    if fault.get("op") == "error":
        findings = fault.get("findings") if isinstance(fault.get("findings"), list) else []
        ruling.merge([f for f in findings if isinstance(f, dict)])
        if any(g.severity is Severity.REJECT for g in ruling.v.guards):
            return ruling.end(Status.REJECTED, "", log)
        kind = fault.get("kind", "runtime")
        msg = f"{fault.get('type')} while {STAGES.get(str(fault.get('stage')), fault.get('stage'))}: " \
              f"{fault.get('message', '')}".strip()
        if kind == "memory":
            return ruling.end(Status.CRASHED, f"candidate exceeded its memory limit ({opts_mb(ruling)} MB): {msg}",
                             log)
        status = {"compile": Status.COMPILE_ERROR, "crash": Status.CRASHED}.get(kind, Status.RUNTIME_ERROR)
        return ruling.end(status, msg, log)
    # gone: how it ended is what the orchestrator saw of the process
    outcome = session.cand.wait(min(deadline, time.monotonic() + 5))
    log = session.cand.log()
    if outcome.memory_exceeded:
        return ruling.end(Status.CRASHED, f"candidate exceeded its memory limit ({opts_mb(ruling)} MB)", log)
    if outcome.timed_out:
        return ruling.end(Status.TIMEOUT, "candidate ran past the evaluation's time limit", log)
    during = f" while answering {fault.get('during')} {fault.get('case', '')}".rstrip()
    if outcome.signal_name:
        return ruling.end(Status.CRASHED, f"candidate process died with {outcome.signal_name}{during}", log)
    return ruling.end(Status.CRASHED, f"candidate process exited with code {outcome.returncode}{during} "
                     "without an answer", log)


def opts_mb(ruling: _Ruling) -> int:
    return ruling.opts.limits.memory_mb


def _ended(ruling: _Ruling, session: _Session, outcome: ChildOutcome) -> Verdict:
    """No message will come: a child overran the deadline or its memory, or the judge died."""
    who = TIMEOUT_ROLES.get(session.last, "reference")
    cand_out = session.cand.check(time.monotonic() + 60)
    for child in (session.judge, session.cand):
        child.kill()
    if outcome.timed_out:
        if who == "candidate":
            return ruling.end(Status.TIMEOUT, "candidate ran past the evaluation's time limit", session.cand.log())
        return ruling.task_failed(Status.TIMEOUT, "timeout", "the task's reference ran past the evaluation's "
                                  "time limit", session.judge.log())
    if cand_out is not None and cand_out.memory_exceeded:
        return ruling.end(Status.CRASHED, f"candidate exceeded its memory limit ({opts_mb(ruling)} MB)",
                         session.cand.log())
    if outcome.memory_exceeded:
        return ruling.task_failed(Status.CRASHED, "memory", f"the task's reference failed: it exceeded its memory "
                                  f"limit ({opts_mb(ruling)} MB)", session.judge.log())
    how = f"died with {outcome.signal_name}" if outcome.signal_name else f"exited with code {outcome.returncode}"
    return ruling.task_failed(Status.CRASHED, "crash", f"the task's reference failed: the judge {how}",
                              session.judge.log())


def _run(ruling: _Ruling, session: _Session, deadline: float) -> Verdict:
    v = ruling.v
    checked = False
    while True:
        msg = session.recv(deadline)
        if isinstance(msg, ChildOutcome):
            return _ended(ruling, session, msg)
        op = msg.get("op")
        if op == "loaded":
            v.versions, v.device = msg.get("versions", {}), msg.get("device", "")
            ruling.phase("reference_start")
        elif op == "reference_ready":
            ruling.phase("reference_build")
        elif op == "task_error":
            session.judge.wait(min(deadline, time.monotonic() + 5))  # its last words, in its log
            session.stop()
            kind = msg.get("kind") if msg.get("kind") in ("memory", "inputs") else "error"
            return ruling.task_failed(Status.CRASHED, kind, f"the task's reference failed: {msg.get('type')}: "
                                      f"{msg.get('message', '')}", session.judge.log() + str(msg.get("traceback", "")))
        elif op == "candidate_fault":
            fault = msg.get("fault")
            return _candidate_fault(ruling, session, fault if isinstance(fault, dict) else {}, deadline)
        elif op == "checked":
            checked = True
            ruling.phase("correctness")
            v.trials = int(msg["trials"])
            v.max_abs_err, v.max_rel_err = msg["max_abs_err"], msg["max_rel_err"]
            if isinstance(msg.get("fp64_error"), dict):
                v.fp64_error = {str(k)[:20]: x for k, x in msg["fp64_error"].items()
                                if isinstance(x, (int, float, str)) and not isinstance(x, bool)}
            ruling.merge(msg["findings"])
            v.timing["judge_s"] = msg.get("spent", {})
        elif op == "candidate_report" and checked:
            _merge_report(ruling, session, msg["report"])
            if ruling.opts.device != "cuda" or any(g.severity is not Severity.WARN for g in v.guards):
                session.stop(judge_done=True)  # nothing more is asked of the candidate
                return ruling.end(None, log=session.cand.log())
            queued = time.monotonic()
            ruling.hold.exclusive()  # the GPU alone: the other sandboxes on it frozen (lease.py)
            deadline += time.monotonic() - queued  # nor is waiting for another candidate's timing
            ruling.phase("lease_wait")
            session.send({"op": "time"})
        elif op == "timed":
            ruling.phase("timing")
            _judge_timing(ruling, msg)
            session.stop(judge_done=True)
            return ruling.end(None, log=session.cand.log())


def _merge_report(ruling: _Ruling, session: _Session, report: dict[str, Any]) -> None:
    """The candidate's own account of itself: defence in depth, merged only to make the verdict stricter."""
    v = ruling.v
    if report.get("truncated"):
        ruling.finding("protocol_violation", "the candidate's guard report was oversized")
        return
    findings = report.get("findings")
    ruling.merge([f for f in findings if isinstance(f, dict)] if isinstance(findings, list) else [])
    for key in ("ops", "kernels"):
        value = report.get(key)
        if isinstance(value, dict):
            setattr(v, key, {str(k): int(n) for k, n in value.items() if isinstance(n, int)})
    trace = report.get("device_trace")
    if isinstance(trace, dict):
        _check_device_trace(ruling, trace)
    spent = report.get("spent")
    if isinstance(spent, dict):  # the candidate's own account of its time: informational, never a fact
        v.timing["candidate_s"] = {str(k)[:40]: float(x) for k, x in list(spent.items())[:20]
                                   if isinstance(x, (int, float))}
    if isinstance(report.get("profile"), str):
        v.timing["candidate_profile"] = report["profile"][:60000]
    observed = report.get("sandbox") if isinstance(report.get("sandbox"), dict) else {}
    v.sandbox = {**{k: observed[k] for k in ("uid", "network", "visible_processes") if k in observed},
                 **session.cand.info}
    if session.cand.info["isolation"] == "none":
        strict = ruling.opts.policy == "strict"
        ruling.finding("unsandboxed", f"the candidate ran without OS isolation ({session.cand.info.get('why')}); "
                      + ("the strict policy certifies only isolated candidates" if strict
                         else "in-process guards only"), Severity.REJECT if strict else Severity.WARN)


_MEMORY_KERNELS = ("memcpy", "memset", "copy", "fill", "cat")  # what allocating, copying and casting run


def device_trace_findings(trace: dict[str, Any], policy: str) -> tuple[dict[str, int], list[Finding]]:
    """(the device's kernels, findings) from the device's account of one traced call (CUPTI kernel names) set
    against the launch recorder's for the same call. A recorded launch that ran no kernel on the device is a
    forged launch and rejects; under `strict`, kernels on the device that are neither the candidate's nor memory
    work are named (a warning: torch's own kernel names vary by version). No trace says so and never passes.
    Up to `channel.MAX_NAMES` names of each: at 64, ResNet101's and DenseNet201's honest seeds (50-odd Triton
    kernels beside cuDNN's) were rejected, their later launches cut from the device's list."""

    def counts(key: str) -> dict[str, int]:
        raw = trace.get(key)
        return {str(k)[:200]: int(n) for k, n in list(raw.items())[:channel.MAX_NAMES]
                if isinstance(n, int)} if isinstance(raw, dict) else {}

    device, recorded = counts("kernels"), counts("recorded")
    if trace.get("error") or not device:
        why = trace.get("error") or "the trace holds no device activity"
        return device, [Finding("device_trace_unavailable", f"no device trace of the candidate's call: "
                                f"{str(why)[:200]}", Severity.WARN)]
    found = []
    missing = [k for k in recorded if not any(k in name for name in device)]
    if missing:
        found.append(Finding("launch_not_on_device", f"recorded launches of {', '.join(missing[:5])} ran no kernel "
                             f"on the device (the device ran: {', '.join(list(device)[:5])})", Severity.REJECT))
    other = [n for n in device if not any(k in n for k in recorded) and not any(m in n.lower() for m in _MEMORY_KERNELS)]
    if policy == "strict" and other:
        found.append(Finding("device_kernel_unaccounted", "kernels on the device that the candidate did not launch: "
                             + ", ".join(x[:80] for x in other[:5]), Severity.WARN))
    return device, found


def _check_device_trace(ruling: _Ruling, trace: dict[str, Any]) -> None:
    device, found = device_trace_findings(trace, ruling.opts.policy)
    ruling.v.timing["device_kernels"] = device
    for f in found:
        ruling.finding(f.name, f.message, f.severity)


def _judge_timing(ruling: _Ruling, msg: dict[str, Any]) -> None:
    v, opts = ruling.v, ruling.opts
    claim, check, bound = msg.get("claim", {}), msg.get("check", {}), msg.get("bound", {})
    findings = claim.get("findings")
    ruling.merge([f for f in findings if isinstance(f, dict)] if isinstance(findings, list) else [])
    if not check.get("ok"):
        ruling.finding("changed_after_timing", f"wrong on a fresh input after timing: {check.get('message', '')}",
                      Severity.FAIL)
        return
    v.trials += 1
    try:
        t = claim["timing"]
        ref_ms, cand_ms, speedup = float(t["ref_ms"]), float(t["cand_ms"]), float(t["speedup"])
        ci = [float(x) for x in t["speedup_ci"]]
        bandwidth = float(claim["bandwidth"])
    except (KeyError, TypeError, ValueError):
        ruling.finding("protocol_violation", "the candidate's timing report is malformed")
        return
    v.ref_ms, v.cand_ms, v.speedup = round(ref_ms, 6), round(cand_ms, 6), round(speedup, 4)
    v.speedup_ci = [round(x, 4) for x in ci]
    v.timing.update({k: t.get(k) for k in ("method", "reps", "ref_spread", "cand_spread", "hidden_work_ms")})
    v.timing["bandwidth_gbs"] = round(bandwidth / 1e9, 1)
    extra = t.get("extra") if isinstance(t.get("extra"), dict) else {}
    if "sample_ci" in extra:
        v.timing["sample_ci"] = [round(float(x), 4) for x in extra["sample_ci"]]
    if t.get("canary_failures"):
        ruling.finding("cached_result", f"{t['canary_failures']} timed calls returned outputs that do not match "
                      "the reference on the same inputs (results cached across calls?)", Severity.FAIL)
    hidden = float(t.get("hidden_work_ms") or 0.0)
    if hidden > max(opts.max_hidden_work_ms, 0.5 * cand_ms):
        ruling.finding("hidden_stream_work", f"device-synchronised wall time exceeds the timed events by "
                      f"{hidden:.3f} ms per call: work on another stream or thread")
    if bound.get("k"):
        _check_bound(ruling, bound, ref_ms, cand_ms, str(t.get("method", "")))
    if 0 < bandwidth and bound.get("bytes"):
        floor_ms = bound["bytes"] / bandwidth * 1e3
        v.timing["bandwidth_floor_ms"] = round(floor_ms, 6)
        cacheable = not str(t.get("method", "")).startswith("eager") and bound["bytes"] < 2 * int(
            extra.get("l2_bytes", 50 << 20))
        if not cacheable and cand_ms < opts.implausible_margin * floor_ms:
            ruling.finding("implausible_speedup", f"{cand_ms:.4f} ms is faster than moving its inputs and outputs "
                          f"once at {bandwidth / 1e9:.0f} GB/s allows ({floor_ms:.4f} ms)")


def _check_bound(ruling: _Ruling, bound: dict[str, Any], ref_ms: float, cand_ms: float, method: str) -> None:
    """The judge timed k synchronised calls of the candidate from outside its process: a claimed time well
    below what the judge saw is a forgery. Graph replay legitimately hides launch overhead, which the judge's
    own reference calls measure; eager timing must come close to the wall clock."""
    k = int(bound["k"])
    cand_wall = float(bound["cand_wall_ms"]) / k
    ref_wall = float(bound.get("ref_wall_ms", 0.0)) / k
    ruling.v.timing["wall_bound_ms"] = {"candidate": round(cand_wall, 6), "reference": round(ref_wall, 6), "k": k}
    overhead = max(0.0, ref_wall - ref_ms)  # what the timing method removes from a call of the reference
    slack = 0.5 if method.startswith("eager") else 0.1
    if cand_ms < slack * (cand_wall - 2 * overhead) - 0.02:
        ruling.finding("timing_forged", f"claimed {cand_ms:.4f} ms per call, but {k} synchronised calls took "
                      f"{cand_wall:.4f} ms each as the judge timed them from outside")
    # The reference is timed in the candidate's process too: slowed there, it would inflate the speedup. The
    # judge ran the same reference back to back in its own process; a cold L2 explains a factor, not more.
    if ref_wall > 0 and ref_ms > 3 * ref_wall + 0.05:
        ruling.finding("timing_forged", f"the reference took {ref_ms:.4f} ms per call in the candidate's process, "
                      f"{ref_wall:.4f} ms in the judge's")
