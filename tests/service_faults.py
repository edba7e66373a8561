"""A referee service whose workers can be broken on purpose: what a job that escaped its sandbox could do.

The sandboxes already stop a candidate from signalling anything outside them (test_service.py's hostile
candidates show it), so to prove the service survives a job that *does* reach its worker, `FaultyPool` — a
`LocalPool` — acts out the escape when the candidate's source carries a marker:

    KS_FAULT=kill-worker    the worker SIGKILLs itself (the job killed its parent: the evaluating process)
    KS_FAULT=stop-worker    the worker SIGSTOPs itself (the job froze its parent)
    KS_FAULT=kill-service   the worker SIGKILLs its own parent, the API process

Every other request is evaluated for real. `python tests/service_faults.py --db D --port P` serves it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

from kernelsmith.referee.pool import LocalPool

MARKER = re.compile(r"KS_FAULT=([a-z-]+)")


class FaultyPool(LocalPool):
    def run(self, request: Any) -> dict[str, Any]:
        found = MARKER.search(request.get("candidate_source", "") if isinstance(request, dict) else "")
        if found:
            fault = found.group(1)
            if fault == "kill-worker":
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault == "stop-worker":
                os.kill(os.getpid(), signal.SIGSTOP)
            elif fault == "kill-service":
                os.kill(os.getppid(), signal.SIGKILL)
                signal.pause()  # the parent-death signal ends this worker too
        return super().run(request)


def main() -> None:
    import uvicorn

    from kernelsmith.referee.jobs import JobStore
    from kernelsmith.referee.service import ServiceSettings, create_app
    from kernelsmith.referee.supervisor import WorkerSpec

    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--heartbeat-timeout", type=float, default=3.0)
    args = parser.parse_args()

    def spec(slots: int) -> dict[str, Any]:
        return {"kind": "factory", "target": "service_faults:FaultyPool", "path": [str(Path(__file__).parent)],
                "kwargs": {"device": "cpu", "cpu_slots": slots, "warm": slots if slots > 1 else 0}}

    specs = [WorkerSpec("cpu", spec(2), 2), WorkerSpec("quarantine", spec(1), 1, suspects=True)]
    settings = ServiceSettings.from_env(heartbeat_timeout_s=args.heartbeat_timeout)
    app = create_app(JobStore(args.db), specs, token=os.environ.get("KERNELSMITH_TOKEN"), device="cpu",
                     settings=settings)
    print("serving", flush=True, file=sys.stderr)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
