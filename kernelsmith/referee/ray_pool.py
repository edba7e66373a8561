"""`--backend ray`: evaluations spread over a Ray cluster, one actor per GPU (or per CPU slot on the CPU).

Each actor owns a `LocalPool` for the GPU Ray gave it (Ray sets the actor's CUDA_VISIBLE_DEVICES, so it is
device 0 there), with that GPU's timing lease, so verdicts are the ones the local pool gives: the same
`evaluate()` in the same fresh child processes, on a machine Ray chose. A dead actor is restarted by Ray and
the request it held is retried once on the next one.
"""

from __future__ import annotations

import itertools
import threading
from typing import Any


class _Evaluator:
    def __init__(self, device: str, slots: int):
        from kernelsmith.referee.pool import LocalPool

        self.pool = LocalPool(device, gpus=[0] if device == "cuda" else None, slots_per_gpu=slots, cpu_slots=slots)

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        return self.pool.run(request)

    def stats(self) -> dict[str, Any]:
        return self.pool.stats()


class RayPool:
    def __init__(self, device: str = "cuda", address: str | None = None, actors: int | None = None,
                 slots_per_actor: int = 2):
        import ray

        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        self.device = device
        if device == "cuda":
            n = actors or int(ray.cluster_resources().get("GPU", 0))
            if n < 1:
                raise RuntimeError("backend ray, device cuda: the Ray cluster has no GPU")
            resources = {"num_gpus": 1}
        else:
            n = actors or max(1, int(ray.cluster_resources().get("CPU", 1)) // 2)
            resources = {"num_cpus": 1}
        remote = ray.remote(_Evaluator)
        self.actors = [remote.options(**resources, max_concurrency=slots_per_actor, max_restarts=-1)
                       .remote(device, slots_per_actor) for _ in range(n)]
        self.capacity = n * slots_per_actor
        self._next = itertools.cycle(range(n))
        self._lock = threading.Lock()
        self._ray = ray

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        """Evaluate on the next actor; an actor that dies, or holds the request past its hard limit (frozen), is
        killed (Ray restarts it) and the request tried once more on the next one."""
        from kernelsmith.referee.supervisor import job_limit_s

        for attempt in range(2):
            with self._lock:
                actor = self.actors[next(self._next)]
            try:
                return self._ray.get(actor.run.remote(request), timeout=job_limit_s(request))
            except (self._ray.exceptions.RayActorError, self._ray.exceptions.GetTimeoutError) as exc:
                if isinstance(exc, self._ray.exceptions.GetTimeoutError):
                    self._ray.kill(actor, no_restart=False)
                if attempt:
                    return {"status": "crashed", "correct": False,
                            "error": f"evaluation actor died or froze twice: {type(exc).__name__}"}
        raise AssertionError("unreachable")

    def evaluate_many(self, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=max(1, self.capacity)) as ex:
            return list(ex.map(self.run, requests))

    def stats(self) -> dict[str, Any]:
        per_actor = self._ray.get([a.stats.remote() for a in self.actors])
        return {"backend": "ray", "device": self.device, "actors": len(self.actors), "capacity": self.capacity,
                "completed": sum(s["completed"] for s in per_actor),
                "eval_seconds": round(sum(s["eval_seconds"] for s in per_actor), 3)}

    def close(self) -> None:
        for a in self.actors:
            self._ray.kill(a)
