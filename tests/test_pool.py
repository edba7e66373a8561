"""The evaluation pool: timing leases exclude other work on a GPU; the local pool and Ray agree on verdicts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import CANDIDATES, TASK_RELU, TASK_TINY

from kernelsmith.referee.lease import GpuLease, LeaseHolder
from kernelsmith.referee.pool import LocalPool


def test_timing_lease_never_overlaps_other_work() -> None:
    lease = GpuLease()
    intervals: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def evaluation(i: int) -> None:
        hold = LeaseHolder(lease)  # compile and correctness: shared with the neighbours
        try:
            t0 = time.monotonic()
            time.sleep(0.02 + 0.01 * (i % 3))
            with lock:
                intervals.append(("shared", t0, time.monotonic()))
            hold.exclusive()  # timing: alone on the GPU
            t0 = time.monotonic()
            time.sleep(0.02)
            with lock:
                intervals.append(("exclusive", t0, time.monotonic()))
        finally:
            hold.release()

    threads = [threading.Thread(target=evaluation, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(intervals) == 16
    for kind, a0, a1 in intervals:
        if kind != "exclusive":
            continue
        overlapping = [(k, b0, b1) for k, b0, b1 in intervals if (b0, b1) != (a0, a1) and b0 < a1 and a0 < b1]
        assert not overlapping, f"timing [{a0:.3f}, {a1:.3f}] overlapped {overlapping}"
    shared = sorted((a0, a1) for k, a0, a1 in intervals if k == "shared")
    assert any(b0 < a1 for (_, a1), (b0, _) in zip(shared, shared[1:]))  # correctness work did overlap
    assert lease.state() == {"shared": 0, "exclusive": False, "waiting": 0, "frozen": 0}


class FakeSandbox:
    """A sandbox as the lease sees it; records when it was frozen."""

    def __init__(self, freezable: bool = True):
        self.can, self.frozen, self.closed = freezable, False, False
        self.log: list[tuple[bool, float]] = []

    def freezable(self) -> bool:
        return self.can

    def freeze(self, frozen: bool) -> bool:
        self.frozen = frozen
        self.log.append((frozen, time.monotonic()))
        return True

    def gone(self) -> bool:
        return self.closed


def test_timing_freezes_its_neighbours_instead_of_waiting_for_them() -> None:
    """A neighbour that hangs in its correctness phase (here: never ends) does not hold up a timing phase: its
    sandboxes are frozen for the phase and thawed after it, and the frozen time moves its deadline on."""
    lease = GpuLease()
    hung, spare = FakeSandbox(), FakeSandbox()
    mine = FakeSandbox()
    for s in (hung, spare, mine):
        lease.track(s)
    neighbour = LeaseHolder(lease)
    neighbour.own(hung)
    timer = LeaseHolder(lease)
    timer.own(mine)
    t0 = time.monotonic()
    timer.exclusive()  # the neighbour is still "working": frozen, not waited for
    assert time.monotonic() - t0 < 1.0
    assert hung.frozen and spare.frozen and not mine.frozen
    assert lease.state()["frozen"] == 2
    late = FakeSandbox()
    lease.track(late)  # a sandbox started during the phase (a spare) is frozen at once
    assert late.frozen
    time.sleep(0.2)
    assert neighbour.paused_s() >= 0.2
    timer.release()
    assert not hung.frozen and not spare.frozen and not late.frozen
    paused = neighbour.paused_s()
    time.sleep(0.05)
    assert neighbour.paused_s() == paused  # no longer frozen: its clock runs again
    neighbour.release()
    assert lease.state() == {"shared": 0, "exclusive": False, "waiting": 0, "frozen": 0}


def test_timing_waits_for_work_it_cannot_freeze() -> None:
    """A holder with a sandbox that has no freezer (an ordinary user's, without cgroup v2) is waited for."""
    lease = GpuLease()
    unfreezable = FakeSandbox(freezable=False)
    lease.track(unfreezable)  # not tracked: nothing to freeze
    neighbour = LeaseHolder(lease)
    neighbour.own(unfreezable)
    timer = LeaseHolder(lease)
    timer.own(FakeSandbox())
    acquired = threading.Event()
    t = threading.Thread(target=lambda: (timer.exclusive(), acquired.set()))
    t.start()
    assert not acquired.wait(0.3)
    neighbour.release()
    assert acquired.wait(5)
    t.join()
    assert not unfreezable.log
    timer.release()


def test_a_waiting_timer_freezes_a_neighbour_once_it_names_its_sandboxes() -> None:
    """Until an evaluation names its sandboxes it cannot be frozen and is waited for; naming them ends the wait."""
    lease = GpuLease()
    sandbox = FakeSandbox()
    lease.track(sandbox)
    starting = LeaseHolder(lease)  # its sandboxes are still being started
    timer = LeaseHolder(lease)
    timer.own(FakeSandbox())
    acquired = threading.Event()
    t = threading.Thread(target=lambda: (timer.exclusive(), acquired.set()))
    t.start()
    assert not acquired.wait(0.2)
    starting.own(sandbox)
    assert acquired.wait(5)
    t.join()
    assert sandbox.frozen
    timer.release()
    assert not sandbox.frozen
    starting.release()


def test_a_cgroup_freeze_stops_its_processes() -> None:
    """The kernel's freezer, as the lease uses it: a counting process makes no progress while frozen."""
    import subprocess
    import sys

    from kernelsmith.referee.sandbox import MemoryCgroup

    cg = MemoryCgroup.create(256 << 20, freezer=True)
    if cg is None or not cg.can_freeze():
        pytest.skip("no freezable cgroup this process may create")
    # A pure busy loop (a process printing into an unread pipe blocks once the pipe is full, and then makes no
    # progress whether frozen or not: that made this test flaky on a loaded machine).
    counter = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"], stdout=subprocess.DEVNULL)

    def utime() -> int:
        return int(Path(f"/proc/{counter.pid}/stat").read_text().rsplit(")", 1)[1].split()[11])

    try:
        cg.place(counter.pid)
        assert cg.freeze(True)
        before = utime()
        time.sleep(0.3)
        assert utime() == before  # frozen: not one tick of CPU time
        assert cg.freeze(False)
        deadline = time.monotonic() + 30  # thawed: it runs again (however busy the machine is)
        while utime() <= before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert utime() > before
    finally:
        counter.kill()
        counter.wait()
        cg.remove()


def _requests() -> list[dict]:
    def req(candidate: str, task=TASK_RELU, **options) -> dict:
        return {"task_source": task.read_text(), "task_name": task.name,
                "candidate_source": (CANDIDATES / candidate).read_text(), "options": options}

    bad = req("good_relu.py", trials=0)
    return [req("good_relu.py"), req("adv_zeros.py", TASK_TINY), req("fault_syntax.py"), bad]


EXPECTED = ["correct", "incorrect", "compile_error", "bad_request"]


def test_local_pool_runs_requests_concurrently_in_order() -> None:
    pool = LocalPool("cpu", cpu_slots=2)
    verdicts = pool.evaluate_many(_requests())
    assert [v["status"] for v in verdicts] == EXPECTED
    assert "trials 0" in verdicts[3]["error"]
    assert pool.stats()["completed"] == 3  # the bad request never reached the referee


def test_a_referee_failure_is_that_requests_verdict_not_the_batchs(monkeypatch) -> None:
    """An H100 benchmark once lost 31 finished searches: one evaluation raised inside the referee (a send that
    failed) and `evaluate_many` re-raised it. The failing request gets a crashed verdict that says whose fault."""
    import kernelsmith.referee.evaluation as evaluation

    real, doomed = evaluation.evaluate, (CANDIDATES / "adv_zeros.py").read_text()

    def flaky(task, candidate, opts):
        if candidate.source == doomed:
            raise OSError(90, "Message too long")
        return real(task, candidate, opts)

    monkeypatch.setattr(evaluation, "evaluate", flaky)
    verdicts = LocalPool("cpu", cpu_slots=2).evaluate_many(_requests())
    assert [v["status"] for v in verdicts] == ["correct", "crashed", "compile_error", "bad_request"]
    assert verdicts[1]["error"] == "referee failure (not the candidate's): OSError: [Errno 90] Message too long"


def test_ray_backend_gives_the_local_pools_verdicts() -> None:
    ray = pytest.importorskip("ray")
    from kernelsmith.referee.ray_pool import RayPool

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        pool = RayPool("cpu", actors=1, slots_per_actor=2)
        remote = pool.evaluate_many(_requests())
        local = LocalPool("cpu", cpu_slots=2).evaluate_many(_requests()[:2])
        assert [v["status"] for v in remote] == EXPECTED
        for r, here in zip(remote, local):  # fresh random inputs each time: errors differ, the judgement may not
            assert (r["status"], r["trials"], [g["name"] for g in r["guards"]]) == (
                here["status"], here["trials"], [g["name"] for g in here["guards"]])
        assert pool.stats()["completed"] == 3
        pool.close()
    finally:
        ray.shutdown()


_CROSS = """
import sys, time, json
from kernelsmith.referee.lease import LeaseHolder
out = []
for i in range(4):
    hold = LeaseHolder(None, sys.argv[1])  # no pool: the process's own lease and the GPU's lock file
    time.sleep(0.01)
    hold.exclusive()
    t0 = time.time()
    time.sleep(0.03)
    out.append((t0, time.time()))
    hold.release()
print(json.dumps(out))
"""


def test_timing_never_overlaps_whoever_submits(tmp_path) -> None:
    """Three processes and, in this one, threads without a shared pool lease, all on one GPU: no two timing
    phases overlap (the per-GPU lock file, plus each process's own lease)."""
    import json
    import os
    import subprocess
    import sys

    key = f"test-gpu-{os.getpid()}"
    env = {**os.environ, "KERNELSMITH_LOCK_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _CROSS, key], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(3)]
    intervals: list[tuple[float, float]] = []
    lock = threading.Lock()
    os.environ["KERNELSMITH_LOCK_DIR"] = str(tmp_path)
    try:
        def local() -> None:
            for _ in range(3):
                hold = LeaseHolder(None, key)
                hold.exclusive()
                t0 = time.time()
                time.sleep(0.03)
                with lock:
                    intervals.append((t0, time.time()))
                hold.release()

        threads = [threading.Thread(target=local) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for p in procs:
            out, _ = p.communicate(timeout=60)
            intervals += [tuple(x) for x in json.loads(out)]
    finally:
        del os.environ["KERNELSMITH_LOCK_DIR"]
    assert len(intervals) == 3 * 4 + 2 * 3
    intervals.sort()
    for (a0, a1), (b0, b1) in zip(intervals, intervals[1:]):
        assert b0 >= a1, f"timing phases overlap: {(a0, a1)} and {(b0, b1)}"


def test_automatic_slots_follow_the_host() -> None:
    """Without a number, a GPU gets the host's cores but two (shared among its GPUs), from 2 to 12."""
    from kernelsmith.referee.pool import MAX_AUTO_SLOTS, auto_slots

    assert auto_slots(1, cores=16) == 12 == MAX_AUTO_SLOTS  # the H200 machine: 12 measured best
    assert auto_slots(8, cores=128) == 12 and auto_slots(4, cores=32) == 7
    assert auto_slots(1, cores=2) == 2 and auto_slots(8, cores=8) == 2
    assert LocalPool("cpu").slots == 2  # the CPU keeps its own default
