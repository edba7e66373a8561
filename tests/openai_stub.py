"""A tiny, real HTTP server that speaks OpenAI's chat-completions protocol, for tests.

    with OpenAIStub() as stub:
        stub.push(Reply.error(429, retry_after="1"), Reply.ok("hello", prompt_tokens=7))
        ... point a client at stub.base_url ...
        stub.requests[0].body["model"], stub.requests[0].headers["authorization"], stub.max_in_flight

Replies are served from a FIFO queue; when it is empty `stub.default` answers (an "ok" completion). Every request
is recorded (path, lower-cased headers, parsed JSON body). Runs on 127.0.0.1, an ephemeral port, in a daemon
thread; Nagle is off on accepted sockets (otherwise every small response waits for a delayed ACK, ~40 ms).
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer. `delay_s` is waited before answering (status and body as set)."""

    status: int = 200
    text: str = "ok"
    prompt_tokens: int = 10
    completion_tokens: int = 5
    finish_reason: str = "stop"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    error_message: str = ""  # for status >= 400; "{authorization}" is replaced by the request's header
    usage: bool = True  # False: no "usage" object (some servers omit it)

    @classmethod
    def ok(cls, text: str = "ok", **kw: Any) -> Reply:
        return cls(text=text, **kw)

    @classmethod
    def error(cls, status: int, message: str = "", retry_after: str | None = None, **kw: Any) -> Reply:
        headers = dict(kw.pop("headers", {}))
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        return cls(status=status, error_message=message or f"scripted error {status}", headers=headers, **kw)

    @classmethod
    def delay(cls, seconds: float, text: str = "late", **kw: Any) -> Reply:
        return cls(text=text, delay_s=seconds, **kw)


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    at: float  # time.monotonic() when the request arrived
    reply: Reply


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so the SDK's pool reuses connections
    disable_nagle_algorithm = True  # StreamRequestHandler.setup sets TCP_NODELAY on the accepted socket
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802
        stub = self.server.stub
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        reply = stub._next_reply(body)
        stub._enter(Recorded("POST", self.path, headers, body, time.monotonic(), reply))
        try:
            if reply.delay_s > 0 and stub._stopping.wait(reply.delay_s):
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
            elif reply.status >= 400:
                message = reply.error_message.replace("{authorization}", headers.get("authorization", ""))
                payload = {"error": {"message": message, "type": "stub_error", "code": str(reply.status)}}
                self._send(reply.status, payload, reply.headers)
            else:
                self._send(reply.status, stub._completion(body, reply), reply.headers)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout) before the answer
        finally:
            stub._leave()

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    stub: OpenAIStub


class OpenAIStub:
    """Context manager: starts the server on enter, stops it on exit."""

    def __init__(self, default: Reply | None = None, responder: Any = None) -> None:
        self.default = default or Reply.ok()
        self.responder = responder  # optional: request body -> Reply, when the queue is empty
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._queue: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._ids = 0

    # -- scripting and inspection ---------------------------------------------------------------------------

    def push(self, *replies: Reply) -> OpenAIStub:
        with self._lock:
            self._queue.extend(replies)
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def port(self) -> int:
        assert self._server is not None, "stub not started"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def models_seen(self) -> list[str]:
        with self._lock:
            return [r.body.get("model") for r in self.requests if isinstance(r.body, dict)]

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> OpenAIStub:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stub = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="openai-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> OpenAIStub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler --------------------------------------------------------------------------------

    def _next_reply(self, body: Any = None) -> Reply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        return responder(body) if responder is not None else self.default

    def _enter(self, rec: Recorded) -> None:
        with self._lock:
            self.requests.append(rec)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _completion(self, body: Any, reply: Reply) -> dict[str, Any]:
        with self._lock:
            self._ids += 1
            n = self._ids
        model = body.get("model", "stub") if isinstance(body, dict) else "stub"
        out: dict[str, Any] = {
            "id": f"chatcmpl-stub-{n}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": reply.finish_reason,
                }
            ],
        }
        if reply.usage:
            out["usage"] = {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            }
        return out
