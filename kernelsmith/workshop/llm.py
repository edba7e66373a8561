"""The language-model client the evolution loop uses: chat completions on any OpenAI-compatible endpoint.

One `LLMClient` holds an ensemble of `ModelSpec`s (OpenAI, vLLM, SGLang, LMDeploy, Ollama, ... — anything that
speaks `/v1/chat/completions`) and answers `await client.complete(messages)` with a `Completion`:

- the model is drawn from the weighted ensemble by a hash of `(seed, rng_key)` — or `(seed, call number)` when
  no key is given — so a run's choice sequence is reproducible and independent of completion order;
- an `asyncio.Semaphore` bounds the requests in flight; each request has its own deadline (`timeout_s`);
- retries are done here, not by the SDK (it is built with `max_retries=0`): 408/409/429/5xx, timeouts and
  connection errors are retried with exponential backoff and jitter, honouring `Retry-After` /
  `Retry-After-Ms` (seconds, fractional seconds or an HTTP date; capped at `retry_after_cap_s`); any other
  status (400, 401, 403, 404, 422, ...) raises `LLMError` at once;
- a `Budget` (tokens and/or dollars) is checked before every request is sent: once it is spent, `complete()`
  raises `BudgetExhausted` without touching the network, so a run stops cleanly. Requests already in flight
  when the budget runs out still finish and are charged, so a budget can be overrun by at most `concurrency`
  completions.

API keys are read from the environment (`ModelSpec.api_key_env`) when the client is built. They are never
logged, never part of an exception (messages are scrubbed of the key and SDK exceptions are not chained, since
they hold the request and its `Authorization` header), and never in a `repr` or a returned value. A local server
needs no key: a missing variable becomes the placeholder `"EMPTY"` — except for the OpenAI API itself
(`base_url=None`), where a missing key is an error at construction.

One client belongs to one event loop (the SDK's connection pool does); build it inside the loop that uses it
and `await client.aclose()` at the end (or `async with LLMClient(...) as client:`).
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import logging
import math
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import openai

log = logging.getLogger(__name__)

__all__ = [
    "PLACEHOLDER_KEY",
    "Budget",
    "BudgetExhausted",
    "Completion",
    "LLMClient",
    "LLMError",
    "ModelSpec",
    "parse_retry_after",
]

PLACEHOLDER_KEY = "EMPTY"  # what vLLM / SGLang / Ollama accept when they were started without a key
RETRYABLE_STATUS = frozenset({408, 409, 429})  # plus every 5xx
_REDACTED = "[redacted]"


class LLMError(Exception):
    """A request failed for good: a non-retryable status, or retries exhausted. Never carries an API key."""

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        base_url: str | None = None,
        status_code: int | None = None,
        attempts: int = 0,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.model = model
        self.base_url = base_url
        self.status_code = status_code
        self.attempts = attempts
        self.retryable = retryable  # True: the failure was transient but retries ran out


class BudgetExhausted(Exception):
    """The run's token or money budget is spent; raised by `complete()` before any request is sent.

    Deliberately not an `LLMError`: code that skips a failed proposal (`except LLMError`) must not swallow the
    signal to stop the run.
    """


@dataclass(frozen=True)
class ModelSpec:
    """One model of the ensemble. Holds the *name* of the key's environment variable, never the key."""

    name: str
    base_url: str | None = None  # None: the SDK's default (OPENAI_BASE_URL or https://api.openai.com/v1)
    api_key_env: str = "OPENAI_API_KEY"
    weight: float = 1.0
    temperature: float = 0.6
    top_p: float = 0.95
    max_tokens: int = 8192
    timeout_s: float = 300.0
    max_retries: int = 4  # retries after the first attempt: at most max_retries + 1 requests per call
    price_in_per_mtok: float = 0.0  # USD per million prompt tokens
    price_out_per_mtok: float = 0.0  # USD per million completion tokens
    # Send a per-request sampling `seed` drawn from (client seed, rng_key): vLLM, SGLang, LMDeploy, Ollama and
    # OpenAI then sample each child reproducibly, and siblings that share a prompt still get their own answers.
    send_seed: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("ModelSpec.name must not be empty")
        if not (self.weight >= 0 and math.isfinite(self.weight)):
            raise ValueError(f"ModelSpec {self.name!r}: weight must be finite and >= 0, got {self.weight}")
        if self.max_tokens <= 0:
            raise ValueError(f"ModelSpec {self.name!r}: max_tokens must be > 0")
        if not self.timeout_s > 0:
            raise ValueError(f"ModelSpec {self.name!r}: timeout_s must be > 0")
        if self.max_retries < 0:
            raise ValueError(f"ModelSpec {self.name!r}: max_retries must be >= 0")
        if self.price_in_per_mtok < 0 or self.price_out_per_mtok < 0:
            raise ValueError(f"ModelSpec {self.name!r}: prices must be >= 0")

    def cost_usd(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.price_in_per_mtok + completion_tokens * self.price_out_per_mtok) / 1e6


@dataclass(frozen=True)
class Completion:
    text: str
    model: str  # the ModelSpec name that was asked (servers may report a different alias)
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    latency_s: float  # from the first attempt's start to the answer, backoff waits included
    attempts: int
    finish_reason: str | None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Budget:
    """Token and money limits for a run (None = unlimited). Safe to share between threads and tasks."""

    def __init__(self, max_tokens_total: int | None = None, max_cost_usd: float | None = None) -> None:
        self.max_tokens_total = max_tokens_total
        self.max_cost_usd = max_cost_usd
        self._lock = threading.Lock()
        self._tokens = 0
        self._cost = 0.0
        self._calls = 0

    @property
    def tokens_used(self) -> int:
        with self._lock:
            return self._tokens

    @property
    def cost_used_usd(self) -> float:
        with self._lock:
            return self._cost

    @property
    def calls(self) -> int:
        with self._lock:
            return self._calls

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self._exhausted_locked()

    def _exhausted_locked(self) -> bool:
        if self.max_tokens_total is not None and self._tokens >= self.max_tokens_total:
            return True
        return self.max_cost_usd is not None and self._cost >= self.max_cost_usd

    def charge(self, completion: Completion) -> None:
        with self._lock:
            self._tokens += completion.prompt_tokens + completion.completion_tokens
            self._cost += completion.cost_usd
            self._calls += 1

    def add(self, tokens: int, cost_usd: float) -> None:
        """Count spending done elsewhere (by this run before it was resumed) without a call."""
        with self._lock:
            self._tokens += int(tokens)
            self._cost += float(cost_usd)

    def check(self) -> None:
        """Raise `BudgetExhausted` if the budget is spent."""
        with self._lock:
            if not self._exhausted_locked():
                return
            tokens, cost = self._tokens, self._cost
        raise BudgetExhausted(
            f"budget exhausted: {tokens} tokens used (limit {self.max_tokens_total}), "
            f"${cost:.4f} spent (limit {self.max_cost_usd})"
        )

    def __repr__(self) -> str:
        with self._lock:
            return (
                f"Budget(tokens={self._tokens}/{self.max_tokens_total}, "
                f"cost_usd={self._cost:.4f}/{self.max_cost_usd}, calls={self._calls})"
            )


def parse_retry_after(headers: Mapping[str, str] | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from `Retry-After-Ms` or `Retry-After` (seconds, fractional seconds or an HTTP date).

    None when absent or unparseable; never negative. `headers` must be case-insensitive (httpx's are) or
    lower-case.
    """
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if math.isfinite(ms):
            return max(0.0, ms / 1000.0)
    value = headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        when = email.utils.mktime_tz(parsed)
    except (TypeError, ValueError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def _unit_interval(*parts: object) -> float:
    """A reproducible number in [0, 1) from the parts (stable across processes and Python versions)."""
    digest = hashlib.sha256("\x1f".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclass
class _Attempt:
    """What one failed attempt tells the retry loop (kept free of SDK objects, which hold the request)."""

    retryable: bool
    status_code: int | None
    description: str
    retry_after: float | None = None


class LLMClient:
    """An async chat-completions client over a weighted ensemble of OpenAI-compatible models."""

    def __init__(
        self,
        models: Sequence[ModelSpec],
        concurrency: int = 4,
        budget: Budget | None = None,
        seed: int = 0,
        *,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 30.0,
        retry_after_cap_s: float = 60.0,
    ) -> None:
        models = list(models)
        if not models:
            raise ValueError("LLMClient needs at least one ModelSpec")
        if len({m.name for m in models}) != len(models):
            raise ValueError("ModelSpec names must be unique within an ensemble")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        total = sum(m.weight for m in models)
        if not total > 0:
            raise ValueError("at least one ModelSpec needs a weight > 0")
        self.models: tuple[ModelSpec, ...] = tuple(models)
        self.concurrency = concurrency
        self.budget = budget
        self.seed = seed
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.retry_after_cap_s = retry_after_cap_s
        self._cumulative: list[float] = []
        acc = 0.0
        for m in models:
            acc += m.weight / total
            self._cumulative.append(acc)
        self._calls = 0
        self._calls_lock = threading.Lock()
        self._jitter = random.Random()  # timing only; never affects which model is chosen
        self._sem: asyncio.Semaphore | None = None
        self._sem_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

        # One SDK client per (base_url, key variable); keys are read now and live only inside those clients.
        keys: dict[tuple[str | None, str], str] = {}
        for m in models:
            slot = (m.base_url, m.api_key_env)
            if slot in keys:
                continue
            keys[slot] = os.environ.get(m.api_key_env) or ""
            if not keys[slot]:
                if m.base_url is None:
                    raise LLMError(
                        f"model {m.name!r} uses the OpenAI API but environment variable {m.api_key_env} is not set",
                        model=m.name,
                    )
                keys[slot] = PLACEHOLDER_KEY
        self._secrets = sorted({k for k in keys.values() if k != PLACEHOLDER_KEY}, key=len, reverse=True)
        self._clients: dict[tuple[str | None, str], openai.AsyncOpenAI] = {
            slot: openai.AsyncOpenAI(api_key=key, base_url=slot[0], max_retries=0) for slot, key in keys.items()
        }

    # -- public ---------------------------------------------------------------------------------------------

    @property
    def calls(self) -> int:
        """How many `complete()` calls have been made (the counter that drives the model choice)."""
        with self._calls_lock:
            return self._calls

    def pick(self, index_or_key: int | str) -> ModelSpec:
        """The model the ensemble draws for call number `index_or_key` (int) or for an rng_key (str)."""
        tag = f"#{index_or_key}" if isinstance(index_or_key, int) else f"k:{index_or_key}"
        u = _unit_interval("kernelsmith.llm", self.seed, tag)
        for spec, edge in zip(self.models, self._cumulative):
            if u < edge and spec.weight > 0:
                return spec
        return next(m for m in reversed(self.models) if m.weight > 0)  # u rounding past the last edge

    def request_seed(self, index_or_key: int | str) -> int:
        """The sampling seed sent with call number `index_or_key` (int) or for an rng_key (str): 31 bits."""
        tag = f"#{index_or_key}" if isinstance(index_or_key, int) else f"k:{index_or_key}"
        return int(_unit_interval("kernelsmith.seed", self.seed, tag) * 2**31)

    def base_url_of(self, spec: ModelSpec) -> str:
        return str(self._clients[(spec.base_url, spec.api_key_env)].base_url)

    async def complete(self, messages: list[dict[str, Any]], *, rng_key: str | None = None) -> Completion:
        """One chat completion from a model of the ensemble. Raises `BudgetExhausted` or `LLMError`."""
        if self._closed:
            raise LLMError("LLMClient is closed")
        with self._calls_lock:
            index = self._calls
            self._calls += 1
        spec = self.pick(index if rng_key is None else rng_key)
        seed = self.request_seed(index if rng_key is None else rng_key) if spec.send_seed else None
        client = self._clients[(spec.base_url, spec.api_key_env)]
        base_url = str(client.base_url)
        sem = self._semaphore()
        if self.budget is not None:
            self.budget.check()

        started = time.monotonic()
        attempts = 0
        while True:
            async with sem:
                if self.budget is not None:
                    self.budget.check()  # the budget may have run out while this call waited for a slot
                attempts += 1
                outcome = await self._attempt(client, spec, messages, seed)
            if not isinstance(outcome, _Attempt):
                return self._finish(spec, outcome, started, attempts)
            retries_left = spec.max_retries - (attempts - 1)
            if not outcome.retryable or retries_left <= 0:
                break
            wait = self._backoff(attempts, outcome.retry_after)
            log.warning(
                "model %s at %s: %s (attempt %d of %d); retrying in %.2f s",
                spec.name, base_url, outcome.description, attempts, spec.max_retries + 1, wait,
            )
            await asyncio.sleep(wait)

        why = "retries exhausted" if outcome.retryable else "not retryable"
        raise LLMError(
            f"model {spec.name!r} at {base_url}: {outcome.description} "
            f"({why}; {attempts} attempt{'s' if attempts != 1 else ''})",
            model=spec.name,
            base_url=base_url,
            status_code=outcome.status_code,
            attempts=attempts,
            retryable=outcome.retryable,
        )

    async def aclose(self) -> None:
        self._closed = True
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        models = ", ".join(f"{m.name}@{m.base_url or 'default'}(w={m.weight:g})" for m in self.models)
        return (
            f"LLMClient(models=[{models}], concurrency={self.concurrency}, seed={self.seed}, "
            f"calls={self.calls}, budget={self.budget!r})"
        )

    def __getstate__(self) -> None:
        raise TypeError("LLMClient cannot be pickled (it holds API keys and live connections)")

    # -- internals ------------------------------------------------------------------------------------------

    def _semaphore(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._sem is None or self._sem_loop is not loop:
            self._sem, self._sem_loop = asyncio.Semaphore(self.concurrency), loop
        return self._sem

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            if secret:
                text = text.replace(secret, _REDACTED)
        return text

    def _backoff(self, attempts: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.retry_after_cap_s)
        ceiling = min(self.backoff_max_s, self.backoff_base_s * 2.0 ** (attempts - 1))
        return ceiling * (0.5 + 0.5 * self._jitter.random())  # "equal jitter": [ceiling/2, ceiling)

    async def _attempt(
        self, client: openai.AsyncOpenAI, spec: ModelSpec, messages: list[dict[str, Any]], seed: int | None = None
    ) -> Any:
        """The response, or an `_Attempt` describing the failure. SDK exceptions never leave this method."""
        try:
            return await asyncio.wait_for(
                client.chat.completions.create(
                    model=spec.name,
                    messages=messages,  # type: ignore[arg-type]
                    temperature=spec.temperature,
                    top_p=spec.top_p,
                    max_tokens=spec.max_tokens,
                    timeout=spec.timeout_s,
                    **({"seed": seed} if seed is not None else {}),
                ),
                timeout=spec.timeout_s,
            )
        except openai.APIStatusError as exc:
            status = exc.status_code
            retryable = status in RETRYABLE_STATUS or status >= 500
            should = exc.response.headers.get("x-should-retry")
            if should in ("true", "false"):
                retryable = should == "true"
            detail = self._redact(_error_detail(exc))
            return _Attempt(
                retryable=retryable,
                status_code=status,
                description=f"HTTP {status} {type(exc).__name__}: {detail}",
                retry_after=parse_retry_after(exc.response.headers),
            )
        except (openai.APITimeoutError, asyncio.TimeoutError, TimeoutError):
            return _Attempt(True, None, f"timed out after {spec.timeout_s:g} s")
        except openai.APIConnectionError as exc:
            cause = exc.__cause__
            what = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
            return _Attempt(True, None, f"connection error ({self._redact(what)[:300]})")
        except openai.APIError as exc:  # e.g. a response that does not parse
            return _Attempt(False, None, f"{type(exc).__name__}: {self._redact(str(exc))[:300]}")

    def _finish(self, spec: ModelSpec, response: Any, started: float, attempts: int) -> Completion:
        choices = getattr(response, "choices", None) or []
        if not choices:
            raise LLMError(
                f"model {spec.name!r} at {self.base_url_of(spec)}: response has no choices",
                model=spec.name,
                base_url=self.base_url_of(spec),
                status_code=200,
                attempts=attempts,
            )
        choice = choices[0]
        usage = getattr(response, "usage", None)
        prompt_tokens = int(getattr(usage, "prompt_tokens", 0) or 0)
        completion_tokens = int(getattr(usage, "completion_tokens", 0) or 0)
        completion = Completion(
            text=choice.message.content or "",
            model=spec.name,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=spec.cost_usd(prompt_tokens, completion_tokens),
            latency_s=time.monotonic() - started,
            attempts=attempts,
            finish_reason=choice.finish_reason,
        )
        if self.budget is not None:
            self.budget.charge(completion)
        return completion


def _error_detail(exc: openai.APIStatusError) -> str:
    """The server's error message, short. (`str(exc)` is "Error code: N - {body}"; prefer the body's message.)"""
    body = exc.body
    message: object = None
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = inner.get("message") if isinstance(inner, dict) else inner
    if not message:
        message = exc.message
    text = " ".join(str(message).split())
    return text[:300] + ("…" if len(text) > 300 else "")
