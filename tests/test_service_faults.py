"""The service outlives jobs that break the process evaluating them (issue 15), through HTTP on loopback.

Two attacks once took the service down: a job that killed its worker's parent (then, after each restart,
`recover()` queued it again with no cap, so it killed the service again and an honest job beside it never
finished), and a job that stopped its parent (the whole service froze). The sandboxes now keep a candidate
from signalling anything outside them (test_service.py's hostile candidates and the load benchmark show it);
these tests prove the service survives regardless: `service_faults.FaultyPool` acts out the escape in the
worker when a candidate carries a marker, and every other job is evaluated for real.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest
from conftest import TASK_TINY
from sqlalchemy import select
from test_service import TOKEN, Service, _free_port, request

from kernelsmith.referee.client import RefereeClient, ServiceUnavailable
from kernelsmith.referee.jobs import JOBS, JobStore

FAULTS = Path(__file__).parent / "service_faults.py"


def faulty_service(db: Path, heartbeat_s: float = 3.0) -> Service:
    port = _free_port()
    return Service(db, port, cmd=[sys.executable, str(FAULTS), "--db", str(db), "--port", str(port),
                                  "--heartbeat-timeout", str(heartbeat_s)])


def with_fault(fault: str) -> dict:
    r = request("good_relu.py")
    r["candidate_source"] += f"\n# KS_FAULT={fault}\n"
    return r


HONEST = [(request("good_relu.py"), "correct"), (request("adv_zeros.py", TASK_TINY), "incorrect"),
          (request("good_tiny.py", TASK_TINY), "correct")]


def _check_batch(jobs: list[dict], fault_at: int, expected: list[str], reason: str) -> None:
    statuses = [j["verdict"]["status"] for j in jobs]
    assert statuses == expected, jobs
    bad = jobs[fault_at]
    assert bad["faults"] == 2 and "2 times" in bad["verdict"]["error"] and reason in bad["verdict"]["error"], bad
    for j in jobs:  # one claim per fault, plus the one that gave the verdict (the cap ended the bad one)
        assert j["attempts"] == j["faults"] + (0 if j is bad else 1), j


@pytest.mark.parametrize(("fault", "reason"), [("kill-worker", "killed by SIGKILL"),
                                               ("stop-worker", "stopped answering")])
def test_a_job_that_breaks_its_worker_ends_crashed_and_the_queue_goes_on(tmp_path: Path, fault: str,
                                                                         reason: str) -> None:
    svc = faulty_service(tmp_path / "jobs.db").start()
    try:
        work = tmp_path / "jobs.db.work"
        (work / "cpu" / "kernelsmith-task-planted").mkdir(parents=True)  # as if a job were running there
        (work / "cpu" / "kernelsmith-task-planted" / "seed").write_text("1234")
        with RefereeClient(svc.url, TOKEN) as client:
            requests = [with_fault(fault)] + [r for r, _ in HONEST]
            sub = client.submit(requests)
            jobs = client.wait_batch(sub["batch"], timeout_s=300)
            _check_batch(jobs, 0, ["crashed"] + [s for _, s in HONEST], reason)
            health = client.health()
            workers = {w["name"]: w for w in health["backend"]["workers"]}
            assert workers["cpu"]["restarts"] >= 1 and workers["quarantine"]["restarts"] >= 1, workers
            assert health["jobs"] == {"queued": 0, "running": 0, "done": len(requests)}
            # the service goes on: a later job is evaluated by the restarted worker
            assert client.evaluate_many([request("good_relu.py")], timeout_s=300)[0]["status"] == "correct"
        assert svc.alive()
        stopped = [p for p in svc.descendants() if Path(f"/proc/{p}/stat").exists()
                   and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"]
        assert not stopped, f"a stopped worker was left behind: {stopped}"
        leftovers = sorted(str(p.relative_to(work)) for name in ("cpu", "quarantine") for p in (work / name).glob("*"))
        assert not leftovers, f"temp dirs of the broken workers were left: {leftovers}"
    finally:
        svc.stop()


def test_a_job_that_kills_the_service_is_not_requeued_forever(tmp_path: Path) -> None:
    """The service itself is killed by a job (as systemd would, the test starts it again each time): each
    unclean stop is a fault of the jobs it was running, the suspect runs alone, and at the second fault it
    ends `crashed`; the honest job queued beside it gets its verdict."""
    db = tmp_path / "jobs.db"
    svc = faulty_service(db).start()
    with RefereeClient(svc.url, TOKEN) as client:
        try:
            batch_id = client.submit([with_fault("kill-service"), request("good_relu.py")])["batch"]
        except ServiceUnavailable:  # the job ran, and killed the service, before the answer went out
            store = JobStore(db)
            batch_id = store.engine.connect().execute(select(JOBS.c.batch).distinct()).scalar_one()
            store.close()
    restarts = 0
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline:
            if not svc.alive():
                restarts += 1
                assert restarts <= 3, "the job keeps killing the service"
                stale = tmp_path / "jobs.db.work" / "cpu" / f"kernelsmith-task-stale{restarts}"
                stale.mkdir(parents=True, exist_ok=True)  # what a killed worker could leave: a job's files
                (stale / "seed").write_text("1234")
                svc.start()
                assert not stale.exists(), "stale job dirs were not removed at start-up"
                continue
            try:
                batch = httpx.get(f"{svc.url}/v1/batches/{batch_id}", params={"wait": 5},
                                  headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30).json()
            except httpx.HTTPError:
                continue  # it died while we waited
            if batch["done"]:
                break
        else:
            raise AssertionError("the batch did not finish")
    finally:
        svc.stop()
    assert restarts == 2, restarts  # once as a neighbour, once alone in the quarantine
    jobs = batch["jobs"]
    assert [j["verdict"]["status"] for j in jobs] == ["crashed", "correct"], jobs
    assert "the service stopped uncleanly" in jobs[0]["verdict"]["error"] and jobs[0]["faults"] == 2
    # it may have been running beside the killer at a kill (then it ran again, once); never crashed for it
    assert jobs[1]["faults"] <= 1 and jobs[1]["attempts"] == jobs[1]["faults"] + 1, jobs[1]
    store = JobStore(db)
    assert store.counts() == {"queued": 0, "running": 0, "done": 2}
    store.close()
