"""An evaluation worker of the service: the process that runs jobs, apart from the one that answers HTTP.

`python -m kernelsmith.referee.service_worker --fd N --spec JSON --parent PID` builds its backend (a
`LocalPool` for one GPU or the CPU, or a named factory) and serves jobs over the socket it inherited: frames
of a 4-byte length and JSON. It sends a heartbeat every `HEARTBEAT_S` from a thread of its own, so the
supervisor (supervisor.py) sees a frozen worker (SIGSTOP, a deadlock) as well as a dead one, and kills it from
outside. The worker dies with the service (parent-death signal, and EOF on the socket), and so do its
sandboxes (bubblewrap's --die-with-parent, the template's PID namespace).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HEARTBEAT_S = 0.5
MAX_FRAME = 64 << 20  # a job (two sources of ≤ 1 MiB each) or a verdict (its log is bounded) is far smaller
MAX_VERDICT_BYTES = 4 << 20


class FrameError(OSError):
    """The peer sent something that is not a frame of this protocol (too big, not JSON)."""


def pack(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":")).encode()
    return struct.pack(">I", len(data)) + data


def unpack(buffer: bytearray) -> list[dict[str, Any]]:
    """Take every complete frame off the front of `buffer`."""
    out = []
    while len(buffer) >= 4:
        (size,) = struct.unpack(">I", buffer[:4])
        if size > MAX_FRAME:
            raise FrameError(f"frame of {size} bytes (limit {MAX_FRAME})")
        if len(buffer) < 4 + size:
            break
        try:
            out.append(json.loads(bytes(buffer[4:4 + size])))
        except ValueError as exc:
            raise FrameError(f"frame is not JSON: {exc}") from None
        del buffer[:4 + size]
    return out


def build_backend(spec: dict[str, Any]) -> Any:
    """The backend a spec names: `{"kind": "local", "kwargs": {...}}` (a LocalPool) or
    `{"kind": "factory", "target": "module:callable", "kwargs": {...}, "path": [dirs to import from]}`."""
    kwargs = spec.get("kwargs") or {}
    if spec["kind"] == "local":
        from kernelsmith.referee.pool import LocalPool

        return LocalPool(**kwargs)
    if spec["kind"] == "factory":
        sys.path[:0] = list(spec.get("path") or [])
        module, _, attr = spec["target"].partition(":")
        return getattr(importlib.import_module(module), attr)(**kwargs)
    raise ValueError(f"unknown backend kind {spec['kind']!r}")


def bounded(verdict: dict[str, Any]) -> dict[str, Any]:
    """The verdict, its log cut to head and tail if it would make the frame too big."""
    if len(json.dumps(verdict)) <= MAX_VERDICT_BYTES:
        return verdict
    log = str(verdict.get("log", ""))
    keep = MAX_VERDICT_BYTES // 8
    verdict = {**verdict, "log": log[:keep] + f"\n[... {len(log) - 2 * keep} characters cut ...]\n" + log[-keep:]}
    if len(json.dumps(verdict)) > MAX_VERDICT_BYTES:  # something else is huge: keep the outcome only
        verdict = {k: verdict.get(k) for k in ("status", "correct", "error", "device", "trials")}
        verdict["error"] = str(verdict.get("error") or "")[:10000]
    return verdict


def die_with_parent(parent: int) -> None:
    """SIGKILL this process when the service dies (Linux prctl); if it has already died, exit now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(0)


class Worker:
    def __init__(self, sock: socket.socket, spec: dict[str, Any]):
        self.sock, self.spec = sock, spec
        self._send_lock = threading.Lock()
        self.backend: Any = None

    def send(self, message: dict[str, Any]) -> None:
        data = pack(message)
        with self._send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                os._exit(0)  # the supervisor is gone: nothing left to work for

    def _heartbeat(self) -> None:
        n = 0
        while True:
            stats: dict[str, Any] = {}
            if self.backend is not None and hasattr(self.backend, "stats"):
                try:
                    stats = self.backend.stats()
                except Exception:  # noqa: BLE001 - stats are best effort; the beat itself must go out
                    stats = {}
            self.send({"hb": n, "stats": stats})
            n += 1
            time.sleep(HEARTBEAT_S)

    def _run(self, job: str, attempt: int, request: dict[str, Any]) -> None:
        try:
            verdict = self.backend.run(request)
        except Exception as exc:  # noqa: BLE001 - the referee itself failed: say so in the verdict
            verdict = {"status": "crashed", "correct": False, "error": f"referee error: {type(exc).__name__}: {exc}"}
        self.send({"done": job, "attempt": attempt, "verdict": bounded(verdict)})

    def serve(self) -> None:
        threading.Thread(target=self._heartbeat, name="kernelsmith-heartbeat", daemon=True).start()
        self.backend = build_backend(self.spec)
        capacity = max(1, int(getattr(self.backend, "capacity", 1)))
        executor = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="kernelsmith-job")
        self.send({"ready": capacity, "pid": os.getpid()})
        buffer = bytearray()
        while True:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                os._exit(0)  # the supervisor closed the socket (or died)
            buffer += chunk
            for message in unpack(buffer):
                if "run" in message:
                    executor.submit(self._run, message["run"], message["attempt"], message["request"])
                elif message.get("stop"):
                    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--spec", required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    die_with_parent(args.parent)
    Worker(socket.socket(fileno=args.fd), json.loads(args.spec)).serve()


if __name__ == "__main__":
    main()
