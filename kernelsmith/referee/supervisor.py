"""The service's evaluation workers, watched from outside: the API process never runs or waits on a job.

Each worker is a process of its own (service_worker.py): one per GPU (its slots run side by side, sharing
the GPU's timing lease and spares as in `LocalPool`), or one for the CPU. A single supervisor thread in the
API process owns them: it claims queued jobs for free slots, sends them, takes verdicts back, and watches
every worker for death (EOF, exit status) and for freezing (no heartbeat for `heartbeat_timeout_s`, e.g. a
SIGSTOP), or a job past its hard limit. A broken worker is killed (its whole process group), its temp dir is
removed, and it is started again with a backoff.

Blame: a worker that died or froze gives each job it held a fault (jobs.py), since any of them may have
caused it; a job past its own limit takes the fault alone and its neighbours are queued again without one.
A job with a fault is a *suspect*: it runs next in the quarantine worker, alone, so a second fault there is
its own — at `max_faults` it ends `crashed` with the reasons, and an honest job that merely shared a worker
with it runs again and gets its verdict.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelsmith.referee.jobs import DEFAULT_MAX_FAULTS, DONE, JobStore
from kernelsmith.referee.service_worker import FrameError, pack, unpack

QUARANTINE_IDLE_S = 60.0  # a quarantine worker with nothing to do is stopped after this long
DEFAULT_TIMEOUT_S = 300.0  # EvalSettings.timeout_s's default, for a request that names none


def reset_dir(path: Path) -> None:
    """Empty the service's work dir (what a killed service left: its jobs' temp dirs, with their tasks)."""
    for stale in path.glob("*") if path.exists() else []:
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() and not stale.is_symlink() else stale.unlink(
            missing_ok=True)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def job_limit_s(request: dict[str, Any], fixed: float | None = None) -> float:
    """The hard limit on one job in a worker: `fixed`, else 3 × its timeout_s + 900 s (its timeout does not
    count waits for sandboxes and for the timing lease, so the limit is generous)."""
    if fixed:
        return fixed
    timeout = (request.get("options") or {}).get("timeout_s", DEFAULT_TIMEOUT_S)
    try:
        timeout = float(timeout)
    except (TypeError, ValueError):
        timeout = DEFAULT_TIMEOUT_S
    return 3 * (timeout if math.isfinite(timeout) and timeout > 0 else DEFAULT_TIMEOUT_S) + 900.0


@dataclass
class WorkerSpec:
    """One worker process: its backend (service_worker.build_backend) and how many jobs it runs at once.
    `suspects`: the quarantine — started when a job has faulted, runs such jobs one at a time."""

    name: str
    backend: dict[str, Any]
    capacity: int
    suspects: bool = False


def specs_for_pool(pool: Any) -> list[WorkerSpec]:
    """Workers equivalent to a `LocalPool`: one per GPU with its slots (or one for the CPU), and a quarantine."""
    if pool.gpus:
        main = [WorkerSpec(f"gpu{g}", {"kind": "local", "kwargs": {
            "device": pool.device, "gpus": [g], "slots_per_gpu": pool.slots, "warm": pool.warm}}, pool.slots)
            for g in pool.gpus]
        alone = {"device": pool.device, "gpus": [pool.gpus[-1]], "slots_per_gpu": 1, "warm": 0}
    else:
        main = [WorkerSpec("cpu", {"kind": "local", "kwargs": {"device": pool.device, "cpu_slots": pool.slots,
                                                                "warm": pool.warm}}, pool.slots)]
        alone = {"device": pool.device, "cpu_slots": 1, "warm": 0}
    return [*main, WorkerSpec("quarantine", {"kind": "local", "kwargs": alone}, 1, suspects=True)]


@dataclass
class _Running:
    attempt: int
    batch: str
    started: float
    limit_s: float


@dataclass
class _Worker:
    spec: WorkerSpec
    proc: subprocess.Popen | None = None
    sock: socket.socket | None = None
    inbuf: bytearray = field(default_factory=bytearray)
    outbuf: bytearray = field(default_factory=bytearray)
    capacity: int = 0  # 0 until it said it is ready
    started: float = 0.0
    last_beat: float = 0.0
    beats: int = 0
    jobs: dict[str, _Running] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    restarts: int = 0
    failures_in_row: int = 0
    restart_at: float = 0.0
    idle_since: float = 0.0
    last_exit: str = ""
    completed: int = 0


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    """Runs the store's jobs on supervised worker processes; `on_done(job, batch)` is called for each verdict
    written (from the supervisor's thread)."""

    def __init__(self, store: JobStore, specs: list[WorkerSpec], *, work_dir: Path,
                 max_faults: int = DEFAULT_MAX_FAULTS, heartbeat_timeout_s: float = 15.0,
                 start_timeout_s: float = 120.0, job_limit_s: float | None = None, device: str = "",
                 scrub: Callable[[Any], Any] = lambda v: v,
                 on_done: Callable[[str, str], None] = lambda job, batch: None):
        self.store, self.work_dir, self.device = store, Path(work_dir), device
        self.max_faults, self.heartbeat_timeout_s = max_faults, heartbeat_timeout_s
        self.start_timeout_s, self.job_limit_s = start_timeout_s, job_limit_s
        self.scrub, self.on_done = scrub, on_done
        self.workers = [_Worker(s) for s in specs]
        self.has_quarantine = any(s.suspects for s in specs)
        self.capacity = sum(s.capacity for s in specs if not s.suspects)
        self.recovered = 0
        self.errors, self.last_error = 0, ""  # the supervisor's own failures (it carries on after each)
        self.eval_seconds_lost = 0.0  # eval seconds of worker processes that are gone
        self.started = time.time()
        self._stop = threading.Event()
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._sel = selectors.DefaultSelector()
        self._thread: threading.Thread | None = None
        self._snapshot: dict[str, Any] = self._take_snapshot()

    # ---- the API process's side: thread-safe, never blocks on a worker ----
    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="kernelsmith-supervisor", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """New jobs were queued: dispatch now rather than at the next tick."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        self.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def snapshot(self) -> dict[str, Any]:
        """The workers' state for /healthz and /metrics (updated by the supervisor's thread every tick)."""
        return self._snapshot

    # ---- the supervisor's thread ----
    def _main(self) -> None:
        self.recovered = self.store.recover(self.max_faults, self.device)
        self.work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        try:
            while not self._stop.is_set():
                try:
                    self._tick()
                except Exception as exc:  # noqa: BLE001 - e.g. the database busy past its timeout: go on
                    self.errors += 1
                    self.last_error = self.scrub(f"{type(exc).__name__}: {str(exc)[:300]}")
                    self._stop.wait(1.0)
        finally:
            for w in self.workers:
                if w.proc is not None:
                    for job, run in w.jobs.items():
                        self.store.requeue(job, run.attempt)  # a clean stop blames no one
                    w.jobs.clear()
                    self._end(w, "the service stopped")

    def _tick(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.proc is None and now >= w.restart_at and self._wanted(w):
                self._start(w)
        self._dispatch()
        for key, mask in self._sel.select(timeout=0.2):
            if key.data is None:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
                continue
            w: _Worker = key.data
            if mask & selectors.EVENT_READ and w.sock is not None:
                self._read(w)
            if mask & selectors.EVENT_WRITE and w.sock is not None:
                self._flush(w)
        self._check()
        self._snapshot = self._take_snapshot()

    def _wanted(self, w: _Worker) -> bool:
        return not w.spec.suspects or self.store.has_queued(suspects=True)

    def _start(self, w: _Worker) -> None:
        ours, theirs = socket.socketpair()
        tmp = self.work_dir / w.spec.name
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700, parents=True)
        env = {**os.environ, "TMPDIR": str(tmp),  # every temp dir of its jobs is here, removed when it ends
               "KERNELSMITH_LOCK_DIR": os.environ.get("KERNELSMITH_LOCK_DIR") or tempfile.gettempdir()}
        with open(self.work_dir / f"{w.spec.name}.log", "wb") as log:
            w.proc = subprocess.Popen(
                [sys.executable, "-m", "kernelsmith.referee.service_worker", "--fd", str(theirs.fileno()),
                 "--spec", json.dumps(w.spec.backend), "--parent", str(os.getpid())],
                pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True)
        theirs.close()
        ours.setblocking(False)
        w.sock, w.capacity, w.beats = ours, 0, 0
        w.inbuf.clear()
        w.outbuf.clear()
        w.started = w.last_beat = w.idle_since = time.monotonic()
        self._sel.register(ours, selectors.EVENT_READ, w)

    def _dispatch(self) -> None:
        main = [w for w in self.workers if w.capacity and not w.spec.suspects]
        while True:
            free = [w for w in main if len(w.jobs) < w.capacity]
            if not free:
                break
            w = min(free, key=lambda x: len(x.jobs) / x.capacity)
            if not self._give(w, None if not self.has_quarantine else False):
                break
        for w in self.workers:
            if w.spec.suspects and w.capacity and not w.jobs:
                self._give(w, True)

    def _give(self, w: _Worker, suspects: bool | None) -> bool:
        claimed = self.store.claim(suspects)
        if claimed is None:
            return False
        limit = job_limit_s(claimed.request, self.job_limit_s)
        w.jobs[claimed.id] = _Running(claimed.attempt, claimed.batch, time.monotonic(), limit)
        w.outbuf += pack({"run": claimed.id, "attempt": claimed.attempt, "request": claimed.request})
        self._flush(w)
        return True

    def _flush(self, w: _Worker) -> None:
        try:
            while w.outbuf:
                sent = w.sock.send(w.outbuf)
                del w.outbuf[:sent]
        except BlockingIOError:
            pass
        except OSError:
            self._lost(w, None)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if w.outbuf else 0)
        self._sel.modify(w.sock, events, w)

    def _read(self, w: _Worker) -> None:
        try:
            chunk = w.sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._lost(w, None)
            return
        w.inbuf += chunk
        try:
            messages = unpack(w.inbuf)
        except FrameError as exc:
            self._lost(w, f"its worker broke the protocol ({exc})")
            return
        for m in messages:
            if "hb" in m:
                w.last_beat, w.beats = time.monotonic(), w.beats + 1
                w.stats = m.get("stats") or {}
            elif "ready" in m:
                w.capacity = max(1, min(int(m["ready"]), w.spec.capacity if not w.spec.suspects else 1))
            elif "done" in m:
                self._done(w, str(m["done"]), int(m.get("attempt", -1)), m.get("verdict"))

    def _done(self, w: _Worker, job: str, attempt: int, verdict: Any) -> None:
        run = w.jobs.get(job)
        if run is None or run.attempt != attempt or not isinstance(verdict, dict):
            return
        del w.jobs[job]
        if not w.jobs:
            w.idle_since = time.monotonic()
        w.completed += 1
        w.failures_in_row = 0
        self.store.finish(job, attempt, self.scrub(verdict))
        self.on_done(job, run.batch)

    def _check(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.proc is None:
                continue
            if w.proc.poll() is not None:
                self._lost(w, None)
                continue
            silent = now - w.last_beat
            if silent > (self.heartbeat_timeout_s if w.beats else max(self.heartbeat_timeout_s, self.start_timeout_s)):
                self._lost(w, f"its worker stopped answering for {silent:.0f} s (frozen or stopped)")
                continue
            late = [(job, run) for job, run in w.jobs.items() if now - run.started > run.limit_s]
            if late:
                job, run = late[0]
                self._lost(w, f"it ran past the service's limit of {run.limit_s:.0f} s", guilty=job)
                continue
            if (w.spec.suspects and not w.jobs and now - w.idle_since > QUARANTINE_IDLE_S
                    and not self.store.has_queued(suspects=True)):
                self._end(w, "idle")
                w.restart_at = 0.0

    def _end(self, w: _Worker, why: str) -> None:
        """Kill the worker's process group, close its socket, remove its temp dir."""
        proc, sock = w.proc, w.sock
        assert proc is not None
        if sock is not None:
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(sock)
            sock.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        shutil.rmtree(self.work_dir / w.spec.name, ignore_errors=True)
        self.eval_seconds_lost += float(w.stats.get("eval_seconds", 0.0) or 0.0)
        w.proc, w.sock, w.capacity, w.stats = None, None, 0, {}
        w.last_exit = why

    def _lost(self, w: _Worker, reason: str | None, guilty: str | None = None) -> None:
        """The worker died (reason None: find out how), froze or held a job past its limit: fault its jobs."""
        if w.proc is None:
            return
        code = w.proc.poll()
        if reason is None and code is None:  # EOF but still alive: wait a moment for its status
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = w.proc.wait(2)
        if reason is None:
            how = _exit_reason(code)
            reason = ("its worker closed its connection" if code is None
                      else f"its worker was {how}" if code < 0 else f"its worker {how}")
        self._end(w, reason)
        for job, run in w.jobs.items():
            if guilty is None or job == guilty:
                status = self.store.fault(job, run.attempt, reason, self.max_faults, self.device)
            else:
                status = "queued" if self.store.requeue(job, run.attempt) else None
            if status == DONE:
                self.on_done(job, run.batch)
        w.jobs.clear()
        w.restarts += 1
        w.failures_in_row += 1
        w.restart_at = time.monotonic() + min(30.0, 0.5 * 2 ** min(w.failures_in_row - 1, 6))

    def _take_snapshot(self) -> dict[str, Any]:
        workers = []
        for w in self.workers:
            state = "down" if w.proc is None else "ready" if w.capacity else "starting"
            if w.proc is None and w.spec.suspects and w.last_exit in ("", "idle"):
                state = "idle"
            workers.append({"name": w.spec.name, "state": state, "jobs": len(w.jobs), "capacity": w.spec.capacity,
                            "restarts": w.restarts, "completed": w.completed, "last_exit": w.last_exit})
        main = [w for w in self.workers if not w.spec.suspects]
        return {"capacity": self.capacity, "busy": sum(len(w.jobs) for w in self.workers),
                "ready": bool(main) and all(w.capacity for w in main), "workers": workers,
                "recovered": self.recovered, "max_faults": self.max_faults,
                "supervisor": {"alive": self._thread is not None and self._thread.is_alive(), "errors": self.errors,
                               "last_error": self.last_error},
                "eval_seconds": round(self.eval_seconds_lost + sum(
                    float(w.stats.get("eval_seconds", 0.0) or 0.0) for w in self.workers), 3)}
