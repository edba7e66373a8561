"""The referee as a service: `kernelsmith serve` in a subprocess, driven over HTTP by the Python client.

CPU only (Triton interpreter, no timing). The load-and-faults test floods one service with a batch mixing
correct, wrong, crashing, hanging and unparseable candidates, kills the service (SIGKILL) mid-batch,
restarts it on the same job database, and checks that every job ends with the right verdict exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import CANDIDATES, TASK_RELU, TASK_TINY

from kernelsmith.referee.client import RefereeClient, ServiceError
from kernelsmith.referee.jobs import JobStore

TOKEN = "test-token-5f1e"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`kernelsmith serve` (or `cmd`, another launcher of the same app) in a subprocess, on loopback."""

    def __init__(self, db: Path, port: int, *extra: str, cmd: list[str] | None = None,
                 env: dict[str, str] | None = None):
        self.db, self.port, self.extra = db, port, extra
        self.url = f"http://127.0.0.1:{port}"
        self.cmd = cmd or [sys.executable, "-c", "from kernelsmith.cli import app; app()", "serve", "--device", "cpu",
                           "--port", str(port), "--db", str(db), "--cpu-slots", "2", *extra]
        self.env = env or {}
        self.proc: subprocess.Popen | None = None

    def start(self) -> Service:
        env = {**os.environ, "KERNELSMITH_TOKEN": TOKEN, **self.env}
        self.log = open(self.db.parent / f"service-{self.port}.log", "ab")  # noqa: SIM115 - kept while it runs
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
            if self.proc.poll() is not None:
                raise RuntimeError((self.db.parent / f"service-{self.port}.log").read_text()[-5000:])
        raise RuntimeError("service did not start")

    def descendants(self) -> list[int]:
        """PIDs of every process below the service (its workers, their sandboxes)."""
        found, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                tasks = list(Path(f"/proc/{pid}/task").iterdir())
            except OSError:
                continue
            for task in tasks:
                try:
                    kids = [int(p) for p in (task / "children").read_text().split()]
                except OSError:
                    continue
                found += kids
                todo += kids
        return found

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def request(candidate: str, task: Path = TASK_RELU, **options) -> dict:
    return {"task_source": task.read_text(), "task_name": task.name,
            "candidate_source": (CANDIDATES / candidate).read_text(), "options": options}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    svc = Service(tmp_path_factory.mktemp("svc") / "jobs.db", _free_port(), "--max-request-mb", "0.25",
                  env={"KERNELSMITH_ALLOWED_HOSTS": "kernelsmith.test", "KERNELSMITH_CLIENT_MAX_JOBS": "6"}).start()
    yield svc
    svc.stop()


def test_refuses_without_token_and_oversized_or_bad_requests(service: Service) -> None:
    r = httpx.post(f"{service.url}/v1/evaluations", json=request("good_relu.py"))
    assert r.status_code == 401
    r = httpx.post(f"{service.url}/v1/evaluations", json=request("good_relu.py"),
                   headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401
    with RefereeClient(service.url, TOKEN) as client:
        big = request("good_relu.py")
        big["candidate_source"] += "#" * (300 << 10)
        with pytest.raises(ServiceError, match="413"):
            client.submit([big])
        broken = request("good_relu.py")
        broken["task_source"] = "import torch\n"  # no Model, no get_inputs
        with pytest.raises(ServiceError, match=r"422.*task_relu\.py"):
            client.submit([broken])
        with pytest.raises(ServiceError, match="unknown option.*colour"):
            client.submit([request("good_relu.py", colour="red")])
        with pytest.raises(ServiceError, match="404"):
            client.job("0" * 32)
        assert client.health()["jobs"]["queued"] == 0  # nothing refused was queued
    schema = httpx.get(f"{service.url}/openapi.json").json()
    assert "/v1/evaluations" in schema["paths"] and "/v1/batches/{batch_id}" in schema["paths"]


def test_client_evaluates_files_and_metrics_count_them(service: Service) -> None:
    with RefereeClient(service.url, TOKEN) as client:
        v = client.evaluate(TASK_RELU, CANDIDATES / "good_relu.py")
        assert v["status"] == "correct" and v["trials"] == 5, v
        metrics = httpx.get(f"{service.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    assert 'kernelsmith_verdicts{status="correct"}' in metrics
    assert 'kernelsmith_jobs{state="done"}' in metrics


EXPECTED = [  # (candidate, task, options, verdict status)
    ("good_relu.py", TASK_RELU, {}, "correct"),
    ("fault_hang.py", TASK_RELU, {"timeout_s": 12}, "timeout"),
    ("adv_zeros.py", TASK_TINY, {}, "incorrect"),
    ("fault_segfault.py", TASK_RELU, {}, "crashed"),
    ("fault_syntax.py", TASK_RELU, {}, "compile_error"),
    ("good_tiny.py", TASK_TINY, {}, "correct"),
    ("fault_hang.py", TASK_RELU, {"timeout_s": 12}, "timeout"),
    ("adv_inplace.py", TASK_RELU, {}, "incorrect"),
]


def test_batch_survives_a_killed_service_and_ends_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    svc = Service(db, _free_port()).start()
    try:
        with RefereeClient(svc.url, TOKEN) as client:
            sub = client.submit([request(c, t, **o) for c, t, o, _ in EXPECTED])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # let it get some way into the batch
                done = [j for j in client.batch(sub["batch"])["jobs"] if j["status"] == "done"]
                if len(done) >= 2:
                    break
                time.sleep(0.3)
            finished_before = {j["id"]: j for j in client.batch(sub["batch"])["jobs"] if j["status"] == "done"}
            assert finished_before, "nothing finished before the kill"
            workers = [p for p in svc.descendants() if "kernelsmith" in cmdline(p)]
            assert any("kernelsmith.referee.service_worker" in cmdline(p) for p in workers), workers
            svc.kill()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in workers):
                time.sleep(0.2)
            alive = {p: cmdline(p) for p in workers if Path(f"/proc/{p}").exists()}
            assert not alive, f"evaluation workers or sandboxes outlived the killed service: {alive}"
            svc.start()  # same database: the accepted jobs are still there
            jobs = client.wait_batch(sub["batch"], timeout_s=300)
    finally:
        svc.stop()
    assert [j["id"] for j in jobs] == sub["jobs"]
    got = [j["verdict"]["status"] for j in jobs]
    assert got == [e[3] for e in EXPECTED], got
    for j in jobs:
        if j["id"] in finished_before:  # a verdict, once written, is never redone or overwritten
            assert j["attempts"] == 1 and j["finished"] == finished_before[j["id"]]["finished"]
            assert j["verdict"] == finished_before[j["id"]]["verdict"]
    assert any(j["attempts"] == 2 for j in jobs)  # what was in flight at the kill ran again, once
    store = JobStore(db)
    assert store.counts() == {"queued": 0, "running": 0, "done": len(EXPECTED)}
    store.close()


def test_serve_refuses_a_public_address_without_a_token(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KERNELSMITH_TOKEN"}
    proc = subprocess.run([sys.executable, "-c", "from kernelsmith.cli import app; app()", "serve", "--host",
                           "0.0.0.0", "--device", "cpu", "--db", str(tmp_path / "j.db")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "KERNELSMITH_TOKEN" in proc.stderr and "Traceback" not in proc.stderr


def test_evolve_evaluates_through_the_service(service: Service, tmp_path: Path) -> None:
    """The workshop with `referee_url`: every verdict of the run comes from the service."""
    before = int(httpx.get(f"{service.url}/healthz").json()["jobs"]["done"])
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"referee_url: {service.url}\nproposer: offline\n")
    cmd = [sys.executable, "-c", "from kernelsmith.cli import app; app()", "evolve", str(TASK_RELU), "--device",
           "cpu", "--rounds", "1", "--population", "1", "--run-dir", str(tmp_path / "run"), "--config", str(cfg)]
    proc = subprocess.run(cmd, env={**os.environ, "KERNELSMITH_TOKEN": TOKEN}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "best.py").exists()
    done = int(httpx.get(f"{service.url}/healthz").json()["jobs"]["done"])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["evaluated"] >= 1 and done - before == summary["evaluated"]  # every verdict was a service job
    bad = subprocess.run(cmd[:-4] + ["--run-dir", str(tmp_path / "run2"), "--config", str(cfg)],
                         env={**os.environ, "KERNELSMITH_TOKEN": "wrong"}, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "referee_url" in bad.stderr and "401" in bad.stderr, bad.stderr[-2000:]


def test_rl_reward_through_the_service(service: Service) -> None:
    """The coach's reward with `service_url`: each completion is judged by the service's referee."""
    from test_coach_reward import SOLUTION, WRONG, columns, fenced

    from kernelsmith.coach.reward import KernelReward, reward_for

    before = int(httpx.get(f"{service.url}/healthz").json()["jobs"]["done"])
    reward = KernelReward(service_url=service.url, token=TOKEN)
    out = reward(prompts=[None, None], completions=[fenced(SOLUTION), fenced(WRONG)], **columns(2))
    assert out == [reward_for("correct"), reward_for("incorrect")]
    assert int(httpx.get(f"{service.url}/healthz").json()["jobs"]["done"]) - before == 2


AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_host_header_allow_list(service: Service) -> None:
    """DNS rebinding: a page on evil.example resolved to 127.0.0.1 reaches the service with its own Host."""
    port = service.port
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "127.0.0.2", "kernelsmith.test",
                 f"KernelSmith.Test.:{port}"):
        r = httpx.get(f"{service.url}/healthz", headers={"Host": host})
        assert r.status_code == 200, (host, r.text)
    for host in (f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil.example", "kernelsmith.test.evil"):
        r = httpx.get(f"{service.url}/healthz", headers={"Host": host})
        assert r.status_code == 421 and "not served here" in r.json()["detail"], (host, r.text)
        r = httpx.post(f"{service.url}/v1/evaluations", json=request("good_relu.py"), headers={**AUTH, "Host": host})
        assert r.status_code == 421, r.text
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # HTTP/1.0 with no Host at all
        s.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400"), "a request without Host was served"
    assert httpx.get(f"{service.url}/healthz").json()["jobs"]["queued"] == 0  # nothing refused was queued


def _server_paths(service: Service) -> list[str]:
    import tempfile

    repo = str(Path(__file__).resolve().parent.parent)
    return [repo, sys.prefix, os.path.realpath(sys.prefix), str(service.db.parent), tempfile.gettempdir() + "/"]


def test_no_server_paths_in_responses(service: Service) -> None:
    """422 messages and verdicts (tracebacks, logs) name no file of the server: temp dirs, the work dir,
    the checkout, the interpreter."""
    texts = []
    bad_tasks = {"task_broken.py": "import torch\n", "syntax.py": "def broken(:\n",
                 "relu.py": TASK_RELU.read_text().replace("class Model", "class NotModel")}
    for name, source in bad_tasks.items():
        body = {**request("good_relu.py"), "task_source": source, "task_name": name}
        r = httpx.post(f"{service.url}/v1/evaluations", json=body, headers=AUTH)
        assert r.status_code == 422 and name in r.json()["detail"], r.text
        texts.append(r.text)
    r = httpx.post(f"{service.url}/v1/evaluations", json=request("good_relu.py", timeout_s=-1), headers=AUTH)
    assert r.status_code == 422 and "timeout_s" in r.text, r.text
    texts.append(r.text)
    with RefereeClient(service.url, TOKEN) as client:
        sub = client.submit([request(c) for c in ("fault_import.py", "fault_forward.py", "fault_segfault.py",
                                                  "fault_syntax.py")])
        jobs = client.wait_batch(sub["batch"], timeout_s=300)
        assert [j["verdict"]["status"] for j in jobs] == ["compile_error", "runtime_error", "crashed",
                                                         "compile_error"], jobs
        texts.append(json.dumps(client.batch(sub["batch"])))
        texts += [json.dumps(client.job(j)) for j in sub["jobs"]]
    texts.append(httpx.get(f"{service.url}/healthz").text)
    texts.append(httpx.get(f"{service.url}/metrics", headers=AUTH).text)
    for text in texts:
        for path in _server_paths(service):
            assert path not in text, f"{path} in a response: {text[:3000]}"


def test_long_polls_do_not_starve_health_metrics_or_submissions(service: Service) -> None:
    """60 clients long-polling at once hold no thread: /healthz and /metrics still answer within 1 s (p99 of
    100 probes each), a submission is accepted meanwhile, and every long-poll returns the verdict once it lands."""
    import asyncio

    with RefereeClient(service.url, TOKEN) as client:
        sub = client.submit([request("fault_hang.py", timeout_s=6)])
    job = sub["jobs"][0]

    async def run() -> tuple[list[float], list[float], list[dict], int]:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(base_url=service.url, headers=AUTH, timeout=120, limits=limits) as http:
            polls = [asyncio.create_task(http.get(f"/v1/evaluations/{job}", params={"wait": 90}))
                     for _ in range(45)]
            polls += [asyncio.create_task(http.get(f"/v1/batches/{sub['batch']}", params={"wait": 90}))
                      for _ in range(15)]
            await asyncio.sleep(1.0)  # every long-poll is open and waiting
            health, metrics = [], []
            for i in range(100):
                for path, out in (("/healthz", health), ("/metrics", metrics)):
                    t0 = time.perf_counter()
                    r = await http.get(path)
                    out.append(time.perf_counter() - t0)
                    assert r.status_code == 200, r.text
                if i == 50:
                    accepted = (await http.post("/v1/evaluations", json=request("good_relu.py"))).status_code
                await asyncio.sleep(0.01)
            answers = [(await p).json() for p in polls]
            return health, metrics, answers, accepted

    health, metrics, answers, accepted = asyncio.run(run())
    assert accepted == 202
    for name, times in (("healthz", health), ("metrics", metrics)):
        p99 = sorted(times)[98]
        assert p99 < 1.0, f"/{name} p99 {p99:.3f} s with 60 long-polls open"
    for a in answers:  # each long-poll was woken by the verdict (not cut off) and saw it
        verdict = a["verdict"] if "verdict" in a else a["jobs"][0]["verdict"]
        assert verdict["status"] == "timeout", a


def test_per_client_limit_on_jobs_in_flight(service: Service) -> None:
    """The fixture allows 6 jobs in flight per client: a 7th is refused with 429 and Retry-After until some
    finish; a batch that could never fit is a 422 saying to split it."""
    with RefereeClient(service.url, TOKEN) as client:
        first = client.submit([request("fault_hang.py", timeout_s=3) for _ in range(5)])
        r = httpx.post(f"{service.url}/v1/evaluations", headers=AUTH,
                       json={"requests": [request("good_relu.py"), request("good_relu.py")]})
        assert r.status_code == 429 and r.headers.get("retry-after"), r.text
        assert "limit is 6" in r.json()["detail"] and "5 jobs" in r.json()["detail"], r.text
        r = httpx.post(f"{service.url}/v1/evaluations", headers=AUTH,
                       json={"requests": [request("good_relu.py")] * 7})
        assert r.status_code == 422 and "split it" in r.json()["detail"], r.text
        second = client.submit([request("good_relu.py")])  # 5 + 1 fits
        jobs = client.wait_batch(first["batch"], timeout_s=300) + client.wait_batch(second["batch"], timeout_s=300)
        assert [j["verdict"]["status"] for j in jobs] == ["timeout"] * 5 + ["correct"]
        again = client.submit([request("fault_syntax.py")] * 6)  # all done: the whole allowance is back
        assert [j["verdict"]["status"] for j in client.wait_batch(again["batch"], timeout_s=300)] == ["compile_error"] * 6


@pytest.mark.parametrize(("option", "value", "limit"), [("timeout_s", float("nan"), "finite"),
                                                       ("timeout_s", float("inf"), "finite"),
                                                       ("timeout_s", 1e9, "86400"), ("trials", 100000, "100"),
                                                       ("tolerance", 1e9, "<= 1")])
def test_non_finite_or_huge_options_are_refused(service: Service, option: str, value: float, limit: str) -> None:
    """The numbers once accepted by the service (NaN passed validation, so no deadline fired) are a 422 naming
    the option and its limit; nothing is queued. (The limits themselves live in kernelsmith.settings.)"""
    body = json.dumps({"requests": [request("good_relu.py", **{option: value})]})  # NaN/Infinity as JSON allows
    r = httpx.post(f"{service.url}/v1/evaluations", content=body,
                   headers={**AUTH, "Content-Type": "application/json"})
    assert r.status_code == 422 and option in r.text and limit in r.text, r.text
    assert httpx.get(f"{service.url}/healthz").json()["jobs"]["queued"] == 0
