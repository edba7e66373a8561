"""A Python client for the referee service (`kernelsmith serve`): submit, wait, get verdicts in order.

    client = RefereeClient("http://gpu-box:8470", token=os.environ["KERNELSMITH_TOKEN"])
    verdicts = client.evaluate_many([request, ...])   # dicts, in request order
    verdict = client.evaluate("tasks/level1/01_relu.py", "my_relu.py", options={"policy": "lenient"})
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx


class ServiceError(RuntimeError):
    """The service refused or failed a call; the message carries its status code and explanation."""


class ServiceUnavailable(ServiceError):
    """The service could not be reached (down, restarting, network)."""


class RefereeClient:
    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = 60.0):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RefereeClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, path: str, *, raw: bool = False, **kw: Any) -> Any:
        try:
            r = self.http.request(method, path, **kw)
        except httpx.HTTPError as exc:
            raise ServiceUnavailable(f"{method} {path}: {type(exc).__name__}: {exc}") from None
        if r.status_code >= 400:
            try:
                detail = r.json().get("detail", r.text)
            except ValueError:
                detail = r.text
            raise ServiceError(f"{method} {path}: HTTP {r.status_code}: {detail}")
        return r.text if raw else r.json()

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")

    def check(self) -> dict[str, Any]:
        """Health, after proving the token is accepted (raises ServiceError otherwise)."""
        self._call("GET", "/metrics", raw=True)
        return self.health()

    def submit(self, requests: list[dict[str, Any]]) -> dict[str, Any]:
        """Queue requests; {"batch": id, "jobs": [ids]}."""
        return self._call("POST", "/v1/evaluations", json={"requests": requests})

    def job(self, job_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        return self._call("GET", f"/v1/evaluations/{job_id}", params={"wait": wait_s},
                          timeout=wait_s + 30.0)

    def batch(self, batch_id: str, wait_s: float = 0.0) -> dict[str, Any]:
        """{"batch", "done", "jobs"} now, or once done within `wait_s`."""
        return self._call("GET", f"/v1/batches/{batch_id}", params={"wait": wait_s}, timeout=wait_s + 30.0)

    def wait_batch(self, batch_id: str, timeout_s: float | None = None, poll_s: float = 30.0) -> list[dict[str, Any]]:
        """Block until every job of the batch is done (long-polling); the jobs, in submission order."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            left = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
            try:
                res = self.batch(batch_id, left)
            except ServiceUnavailable:
                time.sleep(1.0)  # the service is restarting: its queue is on disk, keep waiting
                res = {"done": False, "jobs": []}
            if res["done"]:
                return res["jobs"]
            if deadline is not None and time.monotonic() >= deadline:
                raise ServiceError(f"batch {batch_id}: not done after {timeout_s} s")

    def evaluate_many(self, requests: list[dict[str, Any]], timeout_s: float | None = None) -> list[dict[str, Any]]:
        """Verdict dicts, in request order."""
        if not requests:
            return []
        sub = self.submit(requests)
        return [j["verdict"] for j in self.wait_batch(sub["batch"], timeout_s)]

    def evaluate(self, task: str | Path, candidate: str | Path, options: dict[str, Any] | None = None,
                 overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """One evaluation of two files (read here, sent as text)."""
        request = {"task_source": Path(task).read_text(), "task_name": Path(task).name,
                   "candidate_source": Path(candidate).read_text(), "options": options or {},
                   "overrides": overrides or {}}
        return self.evaluate_many([request])[0]
