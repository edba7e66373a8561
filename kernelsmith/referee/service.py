"""The referee as an HTTP service (FastAPI): submit evaluations, poll or wait for verdicts, health and metrics.

Accepted jobs are written to SQLite (`jobs.py`) before the request is answered; a restarted service finishes
what it had accepted. The API process never runs or waits on evaluation work: jobs run in supervised worker
processes (supervisor.py), watched from outside for death and freezing, and a job that breaks its worker
`max_faults` times ends `crashed` while the rest of the queue goes on. Every handler is asynchronous and no
request holds a thread while it waits: long-polls wait on an event set when their job finishes, so health and
metrics answer at once however many clients wait. Database reads run on a small thread pool of their own and
submissions are checked (the task parsed, the options validated: HTTP 422 naming the problem) in separate
processes, so neither can starve the event loop.

Guards: a `Host` allow-list (DNS rebinding against a token-less loopback service: loopback names, the
address the connection came to, and `allowed_hosts`), bodies limited in size (411/413), a bearer token
whenever one is configured (`kernelsmith serve` requires one beyond localhost), a limit on the jobs each
client (its address) has in flight (429), and no server path in any response (public.py).

    POST /v1/evaluations          {"requests": [request, ...]} or one request -> {"batch", "jobs"}
    GET  /v1/evaluations/{job}    ?wait=SECONDS -> {"id", "status", "verdict", "attempts", "faults", ...}
    GET  /v1/batches/{batch}      ?wait=SECONDS -> {"batch", "done", "jobs": [...]}
    GET  /healthz                 queue counts, workers and capacity
    GET  /metrics                 Prometheus text format

A request is the pool's dict (see pool.py): task_source, task_name, candidate_source, options, overrides.
Settings beyond `create_app`'s arguments come from `ServiceSettings` (environment: KERNELSMITH_ALLOWED_HOSTS,
KERNELSMITH_MAX_FAULTS, KERNELSMITH_CLIENT_MAX_JOBS, KERNELSMITH_HEARTBEAT_TIMEOUT_S, KERNELSMITH_JOB_LIMIT_S).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import multiprocessing
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import asynccontextmanager, suppress
from hashlib import sha256
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field, ValidationError

from kernelsmith.referee.jobs import DEFAULT_MAX_FAULTS, DONE, JobStore
from kernelsmith.referee.public import PathScrubber
from kernelsmith.referee.supervisor import Supervisor, WorkerSpec, reset_dir, specs_for_pool

MAX_REQUEST_BYTES = 8 << 20
MAX_BATCH = 1000
MAX_WAIT_S = 600.0
HEALTH_READ_S = 0.5  # /healthz and /metrics give the last known counts if the database takes longer
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


class ServiceSettings(BaseModel):
    """The service's own limits (requests' settings are kernelsmith.settings.EvalSettings)."""

    allowed_hosts: list[str] = Field(default_factory=list, description="Host names served beyond loopback "
                                     "and the address connected to; '*' serves any (no DNS-rebinding guard)")
    max_faults: int = Field(DEFAULT_MAX_FAULTS, ge=1, le=100, description="times a job may break its worker "
                            "before it ends crashed")
    client_max_jobs: int = Field(MAX_BATCH, ge=1, le=1_000_000, description="jobs one client may have queued "
                                 "or running")
    heartbeat_timeout_s: float = Field(15.0, ge=1, le=3600, allow_inf_nan=False,
                                       description="a worker silent this long is frozen: it is killed")
    job_limit_s: float | None = Field(None, gt=0, le=7 * 86400, allow_inf_nan=False, description="hard limit "
                                      "on one job in a worker (default 3 × its timeout_s + 900 s)")
    validators: int = Field(2, ge=1, le=64, description="processes checking submissions")
    work_dir: Path | None = Field(None, description="the workers' temp dirs (default: next to the database)")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None, **given: Any) -> ServiceSettings:
        """Settings from KERNELSMITH_* variables, overridden by `given`; ValueError names a bad one."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in ("allowed_hosts", "max_faults", "client_max_jobs", "heartbeat_timeout_s", "job_limit_s"):
            raw = env.get(f"KERNELSMITH_{name.upper()}")
            if raw is not None and raw.strip():
                values[name] = [h.strip() for h in raw.split(",") if h.strip()] if name == "allowed_hosts" else raw
        values.update({k: v for k, v in given.items() if v is not None})
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"service settings: {problems}") from None


class EvalRequest(BaseModel):
    task_source: str = Field(max_length=1 << 20, description="KernelBench-format task (class Model, get_inputs...)")
    task_name: str = Field("task", max_length=200)
    candidate_source: str = Field(max_length=1 << 20, description="Program defining class ModelNew")
    options: dict[str, Any] = Field(default_factory=dict, description="EvalSettings fields: policy, timeout_s, ...")
    overrides: dict[str, Any] = Field(default_factory=dict, description="Task constants to override")


class Batch(BaseModel):
    requests: list[EvalRequest] = Field(min_length=1, max_length=MAX_BATCH)


class Submitted(BaseModel):
    batch: str
    jobs: list[str]


def _check(request: dict[str, Any], device: str) -> str | None:
    """In a checker process: the reason a request cannot be evaluated, or None."""
    from kernelsmith.referee.pool import RequestError, check_request

    try:
        check_request(request, device)
    except RequestError as exc:
        return str(exc)
    return None


def _start_checker(parent: int, tmp: str) -> None:
    """A checker dies with the service (it would otherwise outlive a SIGKILL), keeps its temp files in the
    service's work dir (emptied at start-up) and imports torch before its first request."""
    from kernelsmith.referee.service_worker import die_with_parent

    die_with_parent(parent)
    own = Path(tmp) / str(os.getpid())
    own.mkdir(mode=0o700, parents=True, exist_ok=True)
    tempfile.tempdir = str(own)
    _check({"task_source": _WARM_TASK, "task_name": "warm", "candidate_source": "pass", "options": {}}, "cpu")


_WARM_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4)]


def get_init_inputs():
    return []
"""


class Checkers:
    """Processes that check submissions (parsing a 1 MiB task takes seconds of CPU: never in the API process).
    A checker that dies is replaced; the request it held is refused, naming no server detail."""

    def __init__(self, processes: int, tmp: Path):
        self.processes, self.tmp = processes, tmp
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._warming: list[Any] = []

    def pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_start_checker, initargs=(os.getpid(), str(self.tmp)))
            return self._pool

    def warm(self) -> None:
        self._warming = [self.pool().submit(int) for _ in range(self.processes)]

    def ready(self) -> bool:
        """Every checker has started (imported torch): a submission is checked in milliseconds."""
        return all(f.done() for f in self._warming)

    async def check(self, requests: list[dict[str, Any]], device: str) -> list[str | None]:
        for _ in range(2):
            pool = self.pool()
            try:
                futures = [asyncio.wrap_future(pool.submit(_check, r, device)) for r in requests]
                return list(await asyncio.gather(*futures))
            except BrokenProcessPool:
                with self._lock:
                    if self._pool is pool:
                        self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
        return ["the request could not be checked (its checker process died)"] * len(requests)

    def close(self) -> None:
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None


class Waiters:
    """Long-polls waiting for jobs or batches, woken from the supervisor's thread: no thread is held."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def register(self, keys: Iterable[str]) -> tuple[asyncio.Event, list[str]]:
        """Register before reading the state, so a finish between the read and the wait is not missed."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        keys = list(keys)
        with self._lock:
            for k in keys:
                self._waiting.setdefault(k, set()).add(entry)
        return entry[1], keys

    def unregister(self, event: asyncio.Event, keys: list[str]) -> None:
        with self._lock:
            for k in keys:
                entries = self._waiting.get(k)
                if entries is not None:
                    entries.difference_update({e for e in entries if e[1] is event})
                    if not entries:
                        del self._waiting[k]

    def notify(self, *keys: str) -> None:
        with self._lock:
            entries = [e for k in keys for e in self._waiting.get(k, ())]
        for loop, event in entries:
            with suppress(RuntimeError):  # the loop has closed: nobody waits any more
                loop.call_soon_threadsafe(event.set)


class Fresh:
    """A value read on a thread, at most one read in flight, given within `within_s` or else the last one."""

    def __init__(self, read: Callable[[], Any], executor: ThreadPoolExecutor, within_s: float = HEALTH_READ_S):
        self.read, self.executor, self.within_s = read, executor, within_s
        self.value: Any = None
        self.stale = True
        self._future: asyncio.Future | None = None

    async def get(self) -> Any:
        if self._future is None or self._future.done():
            self._future = asyncio.get_running_loop().run_in_executor(self.executor, self.read)
        try:
            self.value = await asyncio.wait_for(asyncio.shield(self._future), self.within_s)
            self.stale = False
        except (TimeoutError, asyncio.TimeoutError):
            self.stale = True
        except Exception:  # noqa: BLE001 - a failed read: report the last value, marked stale
            self.stale = True
        return self.value


class Dispatcher:
    """Jobs run on a backend object in this process (`run(request) -> dict`, e.g. RayPool, whose actors are
    processes of their own that Ray restarts): threads that only wait on the backend."""

    def __init__(self, store: JobStore, backend: Any, *, max_faults: int, device: str, scrub: Callable[[Any], Any],
                 on_done: Callable[[str, str], None]):
        self.store, self.backend, self.max_faults, self.device = store, backend, max_faults, device
        self.scrub, self.on_done = scrub, on_done
        self.capacity = max(1, int(getattr(backend, "capacity", 1)))
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self.started = time.time()
        self.recovered = 0
        self._busy = 0

    def start(self) -> None:
        self.recovered = self.store.recover(self.max_faults, self.device)
        for i in range(self.capacity):
            threading.Thread(target=self._loop, name=f"kernelsmith-dispatch-{i}", daemon=True).start()

    def notify(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def stop(self, timeout_s: float = 0.0) -> None:
        self._stop.set()
        self.notify()

    def snapshot(self) -> dict[str, Any]:
        stats: dict[str, Any] = {}
        with suppress(Exception):
            stats = self.backend.stats() if hasattr(self.backend, "stats") else {}
        return {"capacity": self.capacity, "busy": self._busy, "ready": True, "workers": [],
                "recovered": self.recovered, "max_faults": self.max_faults,
                "eval_seconds": stats.get("eval_seconds", 0.0), "backend": stats}

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self.store.claim()
            if job is None:
                with self._wake:
                    self._wake.wait(timeout=1.0)
                continue
            self._busy += 1
            try:
                verdict = self.backend.run(job.request)
            except Exception as exc:  # noqa: BLE001 - the referee itself failed: say so in the verdict
                verdict = {"status": "crashed", "correct": False, "error": f"referee error: {type(exc).__name__}: {exc}"}
            finally:
                self._busy -= 1
            self.store.finish(job.id, job.attempt, self.scrub(verdict))
            self.on_done(job.id, job.batch)


def _host_name(header: str) -> str:
    """The name part of a Host header: `[::1]:8470` -> `::1`, `Example.COM.:80` -> `example.com`."""
    value = header.strip()
    if value.startswith("["):
        value = value[1:value.find("]")] if "]" in value else value[1:]
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".").lower()


def _is_loopback(name: str) -> bool:
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class Gate:
    """ASGI middleware run before any route: the Host allow-list, then the body size limit."""

    def __init__(self, app: Any, allowed_hosts: list[str], max_request_bytes: int):
        self.app, self.max_request_bytes = app, max_request_bytes
        self.any_host = "*" in allowed_hosts
        self.allowed = {_host_name(h) for h in allowed_hosts if h != "*"}

    def host_allowed(self, scope: dict[str, Any], name: str) -> bool:
        if self.any_host or name in self.allowed or _is_loopback(name):
            return True
        server = scope.get("server") or (None,)
        return bool(name) and server[0] is not None and name == _host_name(str(server[0]))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host")
        if host is None:
            return await JSONResponse({"detail": "a Host header is required"}, 400)(scope, receive, send)
        if not self.host_allowed(scope, _host_name(host)):
            detail = (f"Host {_host_name(host)[:100]!r} is not served here (DNS-rebinding guard; the service's "
                      f"operator can allow it with KERNELSMITH_ALLOWED_HOSTS)")
            return await JSONResponse({"detail": detail}, 421)(scope, receive, send)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            length = headers.get("content-length")
            if length is None:
                return await JSONResponse({"detail": "a Content-Length header is required"}, 411)(scope, receive, send)
            if not length.isdigit() or int(length) > self.max_request_bytes:
                detail = f"request body over {self.max_request_bytes} bytes"
                return await JSONResponse({"detail": detail}, 413)(scope, receive, send)
        return await self.app(scope, receive, send)


def default_work_dir(store: JobStore) -> Path:
    """Where the workers' temp dirs go: next to a database file, else under the temp dir by the URL's hash."""
    if store.url.startswith("sqlite:///") and store.url != "sqlite:///:memory:":
        db = Path(store.url.removeprefix("sqlite:///"))
        return db.parent / f"{db.name}.work"
    return Path(tempfile.gettempdir()) / f"kernelsmith-service-{sha256(store.url.encode()).hexdigest()[:12]}"


def create_app(store: JobStore, backend: Any, *, token: str | None = None, device: str = "cuda",
               max_request_bytes: int = MAX_REQUEST_BYTES, dispatch: bool = True,
               settings: ServiceSettings | None = None, host: str | None = None) -> FastAPI:
    """The service over `store` and `backend`: a `LocalPool` (run in supervised worker processes, see
    supervisor.py), a list of `WorkerSpec`s, or any object with `run(request) -> dict` (e.g. a `RayPool`,
    run from threads here). `host`: the address it is bound to (served besides loopback)."""
    from kernelsmith.referee.pool import LocalPool

    settings = settings or ServiceSettings.from_env()
    allowed = [*settings.allowed_hosts, *([host] if host else [])]
    work_dir = settings.work_dir or default_work_dir(store)
    scrub = PathScrubber({str(work_dir.resolve()): "<work>", str(work_dir): "<work>"})
    waiters = Waiters()
    reads = ThreadPoolExecutor(8, thread_name_prefix="kernelsmith-db")
    health_reads = ThreadPoolExecutor(2, thread_name_prefix="kernelsmith-health")
    checkers = Checkers(settings.validators, work_dir / "checkers")
    add_lock = threading.Lock()

    def on_done(job_id: str, batch_id: str) -> None:
        waiters.notify(job_id, batch_id)

    specs = specs_for_pool(backend) if isinstance(backend, LocalPool) else backend if isinstance(backend, list) else None
    if specs is not None:
        runner: Supervisor | Dispatcher = Supervisor(
            store, specs, work_dir=work_dir, max_faults=settings.max_faults,
            heartbeat_timeout_s=settings.heartbeat_timeout_s, job_limit_s=settings.job_limit_s, device=device,
            scrub=scrub, on_done=on_done)
    else:
        runner = Dispatcher(store, backend, max_faults=settings.max_faults, device=device, scrub=scrub,
                            on_done=on_done)
    started = time.time()
    counts = Fresh(store.counts, health_reads)
    verdicts = Fresh(store.verdict_counts, health_reads)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):  # noqa: ANN202
        reset_dir(work_dir)
        if dispatch:
            runner.start()
        checkers.warm()
        yield
        runner.stop()
        checkers.close()
        reads.shutdown(wait=False, cancel_futures=True)
        health_reads.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="kernelsmith referee", version="1", lifespan=lifespan,
                  description="Honest evaluation of Triton candidates against KernelBench-format tasks.")
    app.add_middleware(Gate, allowed_hosts=allowed, max_request_bytes=max_request_bytes)
    app.state.runner = app.state.dispatcher = runner
    app.state.settings = settings

    async def authorised(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    guarded = [Depends(authorised)]

    async def read(fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(reads, fn, *args)

    def client_of(request: Request) -> str:
        return request.client.host if request.client else "unknown"

    def add(requests: list[dict[str, Any]], client: str) -> tuple[str, list[str]] | int:
        with add_lock:  # the count and the insert as one step
            held = store.in_flight(client)
            if held + len(requests) > settings.client_max_jobs:
                return held
            return store.add(requests, client)

    @app.post("/v1/evaluations", status_code=202, response_model=Submitted, dependencies=guarded)
    async def submit(body: Batch | EvalRequest, request: Request) -> Submitted:
        requests = [r.model_dump() for r in (body.requests if isinstance(body, Batch) else [body])]
        client = client_of(request)
        limit = settings.client_max_jobs
        if len(requests) > limit:
            raise HTTPException(422, f"a batch of {len(requests)} jobs is over the limit of {limit} jobs in flight "
                                     "per client: split it")
        for i, problem in enumerate(await checkers.check(requests, device)):
            if problem is not None:
                raise HTTPException(422, scrub(f"request {i} ({requests[i]['task_name']}): {problem}"))
        added = await read(add, requests, client)
        if isinstance(added, int):
            raise HTTPException(429, f"client {client} has {added} jobs queued or running; the limit is {limit} "
                                     f"and this batch adds {len(requests)}: retry when some have finished",
                                headers={"Retry-After": "10"})
        runner.notify()
        return Submitted(batch=added[0], jobs=added[1])

    async def wait_for(keys: list[str], fetch: Callable[[], Any], done: Callable[[Any], bool], wait: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(wait, MAX_WAIT_S)
        while True:
            event, registered = waiters.register(keys)
            try:
                value = await read(fetch)
                left = deadline - loop.time()
                if not value or done(value) or left <= 0:
                    return value
                with suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(event.wait(), min(left, 5.0))  # a missed wake costs 5 s at most
            finally:
                waiters.unregister(event, registered)

    wait_query = Query(0.0, ge=0, allow_inf_nan=False, description=f"seconds to wait (at most {MAX_WAIT_S:.0f})")

    @app.get("/v1/evaluations/{job_id}", dependencies=guarded)
    async def job(job_id: str, wait: float = wait_query) -> dict[str, Any]:
        found = await wait_for([job_id], lambda: store.get(job_id), lambda j: j["status"] == DONE, wait)
        if found is None:
            raise HTTPException(404, f"no job {job_id[:64]}")
        return found

    @app.get("/v1/batches/{batch_id}", dependencies=guarded)
    async def batch(batch_id: str, wait: float = wait_query) -> dict[str, Any]:
        jobs = await wait_for([batch_id], lambda: store.batch(batch_id),
                              lambda js: all(j["status"] == DONE for j in js), wait)
        if not jobs:
            raise HTTPException(404, f"no batch {batch_id[:64]}")
        return {"batch": batch_id, "done": all(j["status"] == DONE for j in jobs), "jobs": jobs}

    @app.get("/healthz")
    async def health() -> dict[str, Any]:
        jobs = await counts.get()
        snap = runner.snapshot()
        return {"ok": True, "jobs": jobs, "stale": counts.stale, "backend": snap, "checkers_ready": checkers.ready(),
                "uptime_s": round(time.time() - started, 1)}

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=guarded)
    async def metrics() -> str:
        jobs, by_status = await counts.get(), await verdicts.get()
        snap = runner.snapshot()
        lines = ["# HELP kernelsmith_jobs Jobs by queue state.", "# TYPE kernelsmith_jobs gauge"]
        lines += [f'kernelsmith_jobs{{state="{s}"}} {n}' for s, n in (jobs or {}).items()]
        lines += ["# HELP kernelsmith_verdicts Finished jobs by verdict status.", "# TYPE kernelsmith_verdicts gauge"]
        lines += [f'kernelsmith_verdicts{{status="{s}"}} {n}' for s, n in sorted((by_status or {}).items())]
        lines += ["# TYPE kernelsmith_eval_seconds_total counter",
                  f"kernelsmith_eval_seconds_total {snap.get('eval_seconds', 0.0)}",
                  "# HELP kernelsmith_workers Evaluation workers by state.", "# TYPE kernelsmith_workers gauge"]
        states: dict[str, int] = {}
        for w in snap.get("workers", []):
            states[w["state"]] = states.get(w["state"], 0) + 1
        lines += [f'kernelsmith_workers{{state="{s}"}} {n}' for s, n in sorted(states.items())]
        lines += ["# TYPE kernelsmith_worker_restarts_total counter",
                  f"kernelsmith_worker_restarts_total {sum(w['restarts'] for w in snap.get('workers', []))}"]
        return "\n".join(lines) + "\n"

    return app


__all__ = ["MAX_BATCH", "ServiceSettings", "WorkerSpec", "create_app"]
