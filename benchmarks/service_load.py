"""Load and faults against the referee service on loopback: does it stay up, and is every verdict right?

Starts `kernelsmith serve` (its own database and port), then `--clients` concurrent clients (each with its own
connection) submit `--n` evaluations between them, one request per submission, and long-poll their verdicts.
`--hostile` of them (default 10%) attack: a candidate that SIGKILLs its parent and every process it can
signal, one that SIGSTOPs them, one that floods stdout and stderr, one that never returns. The rest are
honest with a known verdict (correct, incorrect, compile_error). Meanwhile a prober asks `/healthz` every
`--probe-every` seconds from a thread of its own.

Passes when every honest job ends with exactly one verdict, the right one (done, one attempt, no fault),
every hostile job ends with a verdict, the service is still up, and `/healthz` p99 < 1 s throughout.
Bounded: `--n` submissions and `--max-seconds` in all.

    python benchmarks/service_load.py --device cpu --n 200 --clients 50 --out /tmp/service_load.json
    python benchmarks/service_load.py --device cuda --n 200 --clients 50 --slots 4
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = ROOT / "tests" / "candidates"
TOKEN = "service-load-" + os.urandom(8).hex()

_SIGNAL_ALL = '''"""Hostile: sends {sig} to its parent, to PID 1 and to every process it can signal."""
import os
import signal

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        for target in (os.getppid(), 1, -1):
            try:
                os.kill(target, signal.{sig})
            except OSError:
                pass
        return x
'''
FLOOD = '''"""Hostile: floods stdout and stderr until it is stopped."""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        block = b"x" * (1 << 20)
        while True:
            os.write(1, block)
            os.write(2, block)
'''
HANG = (CANDIDATES / "fault_hang.py").read_text()
HOSTILE = {"kill_parent": _SIGNAL_ALL.format(sig="SIGKILL"), "stop_parent": _SIGNAL_ALL.format(sig="SIGSTOP"),
           "flood": FLOOD, "hang": HANG}
HONEST = [  # (name, task, candidate, expected status)
    ("relu_correct", "task_relu.py", "good_relu.py", "correct"),
    ("tiny_correct", "task_tiny.py", "good_tiny.py", "correct"),
    ("tiny_incorrect", "task_tiny.py", "adv_zeros.py", "incorrect"),
    ("relu_compile_error", "task_relu.py", "fault_syntax.py", "compile_error"),
]


def plan(n: int, hostile_share: float, hostile_timeout: float) -> list[dict[str, Any]]:
    """`n` submissions, the hostile ones spread evenly (kinds in turn), honest ones cycling through HONEST."""
    hostile_n = round(n * hostile_share)
    every = n / hostile_n if hostile_n else n + 1
    hostile_at = {int(i * every + every / 2) for i in range(hostile_n)}
    out, h, k = [], 0, 0
    for i in range(n):
        if i in hostile_at:
            kind = list(HOSTILE)[h % len(HOSTILE)]
            h += 1
            out.append({"name": kind, "hostile": True, "expected": None, "request": {
                "task_source": (CANDIDATES / "task_relu.py").read_text(), "task_name": "task_relu.py",
                "candidate_source": HOSTILE[kind], "options": {"timeout_s": hostile_timeout}}})
        else:
            name, task, cand, expected = HONEST[k % len(HONEST)]
            k += 1
            out.append({"name": name, "hostile": False, "expected": expected, "request": {
                "task_source": (CANDIDATES / task).read_text(), "task_name": task,
                "candidate_source": (CANDIDATES / cand).read_text(), "options": {}}})
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Prober(threading.Thread):
    """Asks /healthz every `every` s; a failure (error, non-200, over 5 s) counts as a latency of 5 s."""

    def __init__(self, url: str, every: float):
        super().__init__(daemon=True, name="healthz-prober")
        self.url, self.every = url, every
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5.0) as http:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                try:
                    r = http.get(f"{self.url}/healthz")
                    if r.status_code != 200:
                        self.failures.append(f"HTTP {r.status_code}")
                except httpx.HTTPError as exc:
                    self.failures.append(type(exc).__name__)
                self.latencies.append(time.perf_counter() - t0)
                self.stop.wait(self.every)


async def client(url: str, jobs: list[dict[str, Any]], deadline: float) -> None:
    """One client: its own connection; submits its jobs one request at a time, then long-polls each."""
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"},
                                 timeout=httpx.Timeout(90.0, connect=30.0)) as http:
        for job in jobs:
            t0 = time.perf_counter()
            while True:
                r = await http.post("/v1/evaluations", json=job["request"])
                if r.status_code != 429:
                    break
                await asyncio.sleep(float(r.headers.get("retry-after", "5")))
            job["submit_s"] = time.perf_counter() - t0
            job["submit_status"] = r.status_code
            if r.status_code != 202:
                job["error"] = r.text[:500]
                continue
            job["id"] = r.json()["jobs"][0]
        for job in jobs:
            while "id" in job and time.monotonic() < deadline:
                wait = max(1.0, min(30.0, deadline - time.monotonic()))
                try:
                    r = await http.get(f"/v1/evaluations/{job['id']}", params={"wait": wait})
                except httpx.HTTPError:
                    await asyncio.sleep(1.0)
                    continue
                got = r.json()
                if got["status"] == "done":
                    job["final"] = got
                    break


async def drive(url: str, jobs: list[dict[str, Any]], clients: int, deadline: float) -> None:
    shares = [jobs[i::clients] for i in range(clients)]
    await asyncio.gather(*(client(url, share, deadline) for share in shares if share))


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="service-load-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-c", "from kernelsmith.cli import app; app()", "serve", "--device", args.device,
           "--port", str(port), "--db", str(work / "jobs.db"), "--cpu-slots", str(args.slots),
           "--slots-per-gpu", str(args.slots)]
    env = {**os.environ, "KERNELSMITH_TOKEN": TOKEN}
    log = open(work / "service.log", "wb")  # noqa: SIM115 - open while the service runs
    service = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    t_start = time.monotonic()
    try:
        while True:
            if service.poll() is not None:
                raise RuntimeError("the service did not start: " + (work / "service.log").read_text()[-3000:])
            try:
                h = httpx.get(f"{url}/healthz", timeout=2).json()
                if h["backend"]["ready"] and h.get("checkers_ready", True):  # warm: measure the steady state
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            if time.monotonic() - t_start > 300:
                raise RuntimeError("the service was not ready within 300 s")
            time.sleep(0.2)
        ready_s = time.monotonic() - t_start
        jobs = plan(args.n, args.hostile, args.hostile_timeout)
        prober = Prober(url, args.probe_every)
        prober.start()
        t0 = time.monotonic()
        asyncio.run(drive(url, jobs, args.clients, t0 + args.max_seconds))
        wall = time.monotonic() - t0
        prober.stop.set()
        prober.join()
        health = httpx.get(f"{url}/healthz", timeout=5).json()
        alive = service.poll() is None
    finally:
        if service.poll() is None:
            service.terminate()
            try:
                service.wait(30)
            except subprocess.TimeoutExpired:
                service.kill()
        log.close()
    return {**summarise(args, jobs, prober, wall, health, alive), "ready_after_s": round(ready_s, 1)}


def summarise(args: argparse.Namespace, jobs: list[dict[str, Any]], prober: Prober, wall: float,
              health: dict[str, Any], alive: bool) -> dict[str, Any]:
    honest = [j for j in jobs if not j["hostile"]]
    hostile = [j for j in jobs if j["hostile"]]
    wrong = []
    for j in honest:
        f = j.get("final")
        if f is None or f["verdict"]["status"] != j["expected"] or f["attempts"] != 1 or f["faults"] != 0:
            wrong.append({"name": j["name"], "expected": j["expected"], "got": f and f["verdict"]["status"],
                          "attempts": f and f["attempts"], "error": j.get("error")})
    hostile_outcomes: dict[str, dict[str, int]] = {}
    for j in hostile:
        status = j["final"]["verdict"]["status"] if j.get("final") else "no verdict"
        hostile_outcomes.setdefault(j["name"], {}).setdefault(status, 0)
        hostile_outcomes[j["name"]][status] += 1
    ids = [j["id"] for j in jobs if "id" in j]
    health_p99 = quantile(prober.latencies, 0.99)
    submit = [j["submit_s"] for j in jobs if "submit_s" in j]
    result = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
        "cpus": os.cpu_count(), "python": platform.python_version(), "command": " ".join(sys.argv),
        "device": args.device, "slots": args.slots, "submissions": len(jobs), "clients": args.clients,
        "hostile": len(hostile), "honest": len(honest), "wall_s": round(wall, 1),
        "verdicts_per_min": round(60 * sum(1 for j in jobs if j.get("final")) / wall, 1),
        "honest_right": len(honest) - len(wrong), "honest_wrong": wrong, "hostile_outcomes": hostile_outcomes,
        "distinct_job_ids": len(set(ids)) == len(ids), "service_alive": alive,
        "healthz": {"probes": len(prober.latencies), "failures": len(prober.failures),
                    "p50_s": quantile(prober.latencies, 0.5), "p99_s": health_p99,
                    "max_s": max(prober.latencies, default=None)},
        "submit": {"p50_s": quantile(submit, 0.5), "p99_s": quantile(submit, 0.99), "max_s": max(submit, default=None),
                   "refused": sum(1 for j in jobs if j.get("submit_status") not in (202, None))},
        "final_health": {"jobs": health.get("jobs"), "workers": health.get("backend", {}).get("workers")},
    }
    result["passed"] = bool(alive and not wrong and all(j.get("final") for j in hostile)
                            and not prober.failures and health_p99 is not None and health_p99 < 1.0
                            and result["distinct_job_ids"])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--n", type=int, default=200, help="submissions")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--hostile", type=float, default=0.1, help="share of hostile submissions")
    parser.add_argument("--hostile-timeout", type=float, default=10.0, help="timeout_s of the hostile jobs")
    parser.add_argument("--slots", type=int, default=2, help="evaluations at once (per GPU, or on the CPU)")
    parser.add_argument("--probe-every", type=float, default=0.1)
    parser.add_argument("--max-seconds", type=float, default=1800.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not 1 <= args.n <= 2000 or not 1 <= args.clients <= 500:
        parser.error("--n must be in 1..2000 and --clients in 1..500")
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
