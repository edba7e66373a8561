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
    def __init__(self, db: Path, port: int, *extra: str):
        self.db, self.port, self.extra = db, port, extra
        self.url = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Service:
        env = {**os.environ, "KERNELSMITH_TOKEN": TOKEN}
        cmd = [sys.executable, "-c", "from kernelsmith.cli import app; app()", "serve", "--device", "cpu",
               "--port", str(self.port), "--db", str(self.db), "--cpu-slots", "2", *self.extra]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
            if self.proc.poll() is not None:
                raise RuntimeError(self.proc.stdout.read().decode())
        raise RuntimeError("service did not start")

    def children(self) -> list[int]:
        """PIDs of the service's child processes (the evaluations' workers)."""
        pids = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            pids += [int(p) for p in (task / "children").read_text().split()]
        return pids

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def request(candidate: str, task: Path = TASK_RELU, **options) -> dict:
    return {"task_source": task.read_text(), "task_name": task.name,
            "candidate_source": (CANDIDATES / candidate).read_text(), "options": options}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    svc = Service(tmp_path_factory.mktemp("svc") / "jobs.db", _free_port(), "--max-request-mb", "0.25").start()
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
            workers = svc.children()
            svc.kill()
            time.sleep(1.0)
            alive = [p for p in workers if Path(f"/proc/{p}").exists()
                     and "kernelsmith.referee.worker" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
            assert not alive, f"evaluation workers outlived the killed service: {alive}"
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
