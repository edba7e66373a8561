"""The referee as an HTTP service (FastAPI): submit evaluations, poll or wait for verdicts, health and metrics.

Accepted jobs are written to SQLite (`jobs.py`) before the request is answered, and dispatcher threads — as
many as the backend has evaluation slots — take them from there, so a restarted service finishes what it had
accepted. Requests are checked at submission (task loads, options valid: HTTP 422 naming the problem); what
the candidate does is its verdict. Bodies are limited in size (413), and a bearer token is required whenever
one is configured (`kernelsmith serve` requires one for any address beyond localhost).

    POST /v1/evaluations          {"requests": [request, ...]} or one request -> {"batch", "jobs"}
    GET  /v1/evaluations/{job}    ?wait=SECONDS -> {"id", "status", "verdict", ...}
    GET  /v1/batches/{batch}      ?wait=SECONDS -> {"batch", "done", "jobs": [...]}
    GET  /healthz                 queue counts and the backend's capacity
    GET  /metrics                 Prometheus text format

A request is the pool's dict (see pool.py): task_source, task_name, candidate_source, options, overrides.
"""

from __future__ import annotations

import hmac
import threading
import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field

from kernelsmith.referee.jobs import DONE, JobStore
from kernelsmith.referee.pool import RequestError, check_request

MAX_REQUEST_BYTES = 8 << 20
MAX_BATCH = 1000
MAX_WAIT_S = 600.0


class EvalRequest(BaseModel):
    task_source: str = Field(max_length=1 << 20, description="KernelBench-format task (class Model, get_inputs...)")
    task_name: str = Field("task", max_length=200)
    candidate_source: str = Field(max_length=1 << 20, description="Program defining class ModelNew")
    options: dict[str, Any] = Field(default_factory=dict, description="EvalOptions fields: policy, timeout_s, ...")
    overrides: dict[str, Any] = Field(default_factory=dict, description="Task constants to override")


class Batch(BaseModel):
    requests: list[EvalRequest] = Field(min_length=1, max_length=MAX_BATCH)


class Submitted(BaseModel):
    batch: str
    jobs: list[str]


class Dispatcher:
    """Threads that take queued jobs and run them on the backend (anything with `run(request) -> dict`)."""

    def __init__(self, store: JobStore, backend: Any, threads: int):
        self.store, self.backend, self.threads = store, backend, threads
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self.started = time.time()

    def start(self) -> None:
        self.store.recover()
        for i in range(self.threads):
            t = threading.Thread(target=self._loop, name=f"kernelsmith-dispatch-{i}", daemon=True)
            t.start()
            self._workers.append(t)

    def notify(self) -> None:
        with self._wake:
            self._wake.notify_all()

    def stop(self) -> None:
        self._stop.set()
        self.notify()

    def _loop(self) -> None:
        while not self._stop.is_set():
            job = self.store.claim()
            if job is None:
                with self._wake:
                    self._wake.wait(timeout=1.0)
                continue
            job_id, attempt, request = job
            try:
                verdict = self.backend.run(request)
            except Exception as exc:  # noqa: BLE001 - the referee itself failed: say so in the verdict
                verdict = {"status": "crashed", "correct": False, "error": f"referee error: {type(exc).__name__}: {exc}"}
            self.store.finish(job_id, attempt, verdict)


def create_app(store: JobStore, backend: Any, *, token: str | None = None, device: str = "cuda",
               max_request_bytes: int = MAX_REQUEST_BYTES, dispatch: bool = True) -> FastAPI:
    """The service over `store` and `backend` (a `LocalPool` or `RayPool`)."""
    dispatcher = Dispatcher(store, backend, max(1, getattr(backend, "capacity", 1)))

    @asynccontextmanager
    async def lifespan(_app: FastAPI):  # noqa: ANN202
        if dispatch:
            dispatcher.start()
        yield
        dispatcher.stop()

    app = FastAPI(title="kernelsmith referee", version="1", lifespan=lifespan,
                  description="Honest evaluation of Triton candidates against KernelBench-format tasks.")
    app.state.dispatcher = dispatcher

    @app.middleware("http")
    async def limit_size(request: Request, call_next):  # noqa: ANN001, ANN202
        if request.method in ("POST", "PUT", "PATCH"):
            length = request.headers.get("content-length")
            if length is None:
                return JSONResponse({"detail": "a Content-Length header is required"}, status_code=411)
            if not length.isdigit() or int(length) > max_request_bytes:
                return JSONResponse({"detail": f"request body over {max_request_bytes} bytes"}, status_code=413)
        return await call_next(request)

    def authorised(request: Request) -> None:
        if token is None:
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    guarded = [Depends(authorised)]

    @app.post("/v1/evaluations", status_code=202, response_model=Submitted, dependencies=guarded)
    def submit(body: Batch | EvalRequest) -> Submitted:
        requests = [r.model_dump() for r in (body.requests if isinstance(body, Batch) else [body])]
        for i, r in enumerate(requests):
            try:
                check_request(r, device)
            except RequestError as exc:
                raise HTTPException(422, f"request {i} ({r['task_name']}): {exc}") from None
        batch, ids = store.add(requests)
        dispatcher.notify()
        return Submitted(batch=batch, jobs=ids)

    def _wait(fetch: Any, done: Any, wait: float) -> Any:
        deadline = time.monotonic() + min(max(wait, 0.0), MAX_WAIT_S)
        value = fetch()
        while value is not None and not done(value) and time.monotonic() < deadline:
            time.sleep(0.1)
            value = fetch()
        return value

    @app.get("/v1/evaluations/{job_id}", dependencies=guarded)
    def job(job_id: str, wait: float = 0.0) -> dict[str, Any]:
        found = _wait(lambda: store.get(job_id), lambda j: j["status"] == DONE, wait)
        if found is None:
            raise HTTPException(404, f"no job {job_id}")
        return found

    @app.get("/v1/batches/{batch_id}", dependencies=guarded)
    def batch(batch_id: str, wait: float = 0.0) -> dict[str, Any]:
        jobs = _wait(lambda: store.batch(batch_id) or None, lambda js: all(j["status"] == DONE for j in js), wait)
        if not jobs:
            raise HTTPException(404, f"no batch {batch_id}")
        return {"batch": batch_id, "done": all(j["status"] == DONE for j in jobs), "jobs": jobs}

    @app.get("/healthz")
    def health() -> dict[str, Any]:
        stats = backend.stats() if hasattr(backend, "stats") else {}
        return {"ok": True, "jobs": store.counts(), "backend": stats, "uptime_s": round(time.time() - dispatcher.started, 1)}

    @app.get("/metrics", response_class=PlainTextResponse, dependencies=guarded)
    def metrics() -> str:
        lines = ["# HELP kernelsmith_jobs Jobs by queue state.", "# TYPE kernelsmith_jobs gauge"]
        lines += [f'kernelsmith_jobs{{state="{s}"}} {n}' for s, n in store.counts().items()]
        lines += ["# HELP kernelsmith_verdicts Finished jobs by verdict status.", "# TYPE kernelsmith_verdicts gauge"]
        lines += [f'kernelsmith_verdicts{{status="{s}"}} {n}' for s, n in sorted(store.verdict_counts().items())]
        stats = backend.stats() if hasattr(backend, "stats") else {}
        if "eval_seconds" in stats:
            lines += ["# TYPE kernelsmith_eval_seconds_total counter",
                      f"kernelsmith_eval_seconds_total {stats['eval_seconds']}"]
        return "\n".join(lines) + "\n"

    return app
