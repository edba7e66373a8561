"""The workshop's model client (`kernelsmith.workshop.llm`) against a real HTTP server, through the real SDK.

No SDK mocks: `openai_stub.OpenAIStub` is a scripted OpenAI-compatible server on 127.0.0.1. pytest-asyncio is
not installed, so every test drives its coroutine with `asyncio.run` (one client per event loop).
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from email.utils import formatdate
from typing import Any

import pytest
from openai_stub import OpenAIStub, Reply

from kernelsmith.workshop.llm import (
    Budget,
    BudgetExhausted,
    Completion,
    LLMClient,
    LLMError,
    ModelSpec,
    parse_retry_after,
)

KEY_ENV = "KS_TEST_LLM_KEY"
KEY = "sk-test-Zq81-very-secret-key-0042"
MESSAGES = [
    {"role": "system", "content": "You write Triton kernels."},
    {"role": "user", "content": "Make softmax faster."},
]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub() as server:
        yield server


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


def spec(stub: OpenAIStub, name: str = "stub-coder", **kw: Any) -> ModelSpec:
    return ModelSpec(name=name, base_url=stub.base_url, api_key_env=KEY_ENV, **kw)


def run_with(
    models: list[ModelSpec], body: Callable[[LLMClient], Any], **client_kw: Any
) -> Any:
    """Build a client inside a fresh event loop, run `await body(client)`, close the client."""
    client_kw.setdefault("backoff_base_s", 0.01)

    async def main() -> Any:
        async with LLMClient(models, **client_kw) as client:
            return await body(client)

    return asyncio.run(main())


def complete_once(models: list[ModelSpec], **client_kw: Any) -> Completion:
    return run_with(models, lambda c: c.complete(MESSAGES), **client_kw)


def fail_once(models: list[ModelSpec], **client_kw: Any) -> tuple[LLMClient, LLMError]:
    """Run one `complete()` that must fail; return the client (for repr checks) and the error."""
    holder: dict[str, Any] = {}

    async def body(client: LLMClient) -> None:
        holder["client"] = client
        with pytest.raises(LLMError) as info:
            await client.complete(MESSAGES)
        holder["error"] = info.value

    run_with(models, body, **client_kw)
    return holder["client"], holder["error"]


def assert_no_key(*things: object) -> None:
    for thing in things:
        assert KEY not in str(thing) and KEY not in repr(thing), thing


# -- the happy path ---------------------------------------------------------------------------------------


def test_completion_round_trip(stub: OpenAIStub) -> None:
    stub.push(Reply.ok("def kernel(): ...", prompt_tokens=1000, completion_tokens=500, finish_reason="length"))
    model = spec(stub, temperature=0.3, top_p=0.8, max_tokens=1234, price_in_per_mtok=2.0, price_out_per_mtok=8.0)
    budget = Budget()
    out = complete_once([model], budget=budget)

    assert out.text == "def kernel(): ..."
    assert out.model == "stub-coder"
    assert (out.prompt_tokens, out.completion_tokens) == (1000, 500)
    assert out.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
    assert out.attempts == 1 and out.finish_reason == "length" and out.latency_s > 0
    assert budget.tokens_used == 1500 and budget.cost_used_usd == pytest.approx(0.006) and budget.calls == 1

    (req,) = stub.requests
    assert req.method == "POST" and req.path == "/v1/chat/completions"
    assert req.body["model"] == "stub-coder"
    assert req.body["messages"] == MESSAGES
    assert req.body["temperature"] == 0.3 and req.body["top_p"] == 0.8 and req.body["max_tokens"] == 1234
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.headers.get("x-stainless-retry-count", "0") == "0"  # the SDK's own retries are off
    assert_no_key(out)


def test_defaults_and_missing_usage(stub: OpenAIStub) -> None:
    stub.push(Reply.ok("x", usage=False))
    out = complete_once([spec(stub, price_in_per_mtok=5.0)])
    assert (out.prompt_tokens, out.completion_tokens, out.cost_usd) == (0, 0, 0.0)
    body = stub.requests[0].body
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.6, 0.95, 8192)


def test_local_server_without_key_sends_placeholder(stub: OpenAIStub, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    complete_once([spec(stub)])
    assert stub.requests[0].headers["authorization"] == "Bearer EMPTY"


def test_openai_api_without_key_fails_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(LLMError, match=KEY_ENV):
        LLMClient([ModelSpec(name="gpt-x", api_key_env=KEY_ENV)])


# -- retries ----------------------------------------------------------------------------------------------


def test_429_retry_after_is_honoured(stub: OpenAIStub) -> None:
    stub.push(Reply.error(429, "slow down", retry_after="1"), Reply.ok("after the wait"))
    out = complete_once([spec(stub)])
    assert out.text == "after the wait" and out.attempts == 2
    first, second = stub.requests
    assert second.at - first.at >= 0.95
    assert out.latency_s >= 0.95


def test_fractional_retry_after_and_retry_after_ms(stub: OpenAIStub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    stub.push(
        Reply.error(429, "rate limited for {authorization}", retry_after="0.3"),
        Reply.error(503, headers={"Retry-After-Ms": "200"}),
        Reply.ok(),
    )
    out = complete_once([spec(stub)])
    assert out.attempts == 3
    t = [r.at for r in stub.requests]
    assert t[1] - t[0] >= 0.28 and t[2] - t[1] >= 0.18
    assert "retrying in 0.30 s" in caplog.text and "rate limited for Bearer [redacted]" in caplog.text
    assert_no_key(caplog.text)


def test_retry_after_is_capped(stub: OpenAIStub) -> None:
    stub.push(Reply.error(429, retry_after="3600"), Reply.ok())
    started = time.monotonic()
    out = complete_once([spec(stub)], retry_after_cap_s=0.2)
    assert out.attempts == 2 and time.monotonic() - started < 5


def test_500_twice_then_success(stub: OpenAIStub) -> None:
    stub.push(Reply.error(500), Reply.error(502), Reply.ok("third time"))
    out = complete_once([spec(stub)])
    assert out.text == "third time" and out.attempts == 3 and len(stub.requests) == 3


def test_retries_exhausted(stub: OpenAIStub) -> None:
    stub.push(*[Reply.error(500, "boom")] * 3)
    _, err = fail_once([spec(stub, max_retries=2)])
    assert err.attempts == 3 and err.status_code == 500 and err.retryable
    assert "boom" in str(err) and "retries exhausted" in str(err)
    assert len(stub.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 404])
def test_non_retryable_status_fails_at_once(stub: OpenAIStub, status: int, caplog: pytest.LogCaptureFixture) -> None:
    # The scripted error echoes the Authorization header, as some servers do: the client must scrub it.
    stub.push(Reply.error(status, "bad credentials: {authorization}"))
    caplog.set_level(logging.DEBUG)
    client, err = fail_once([spec(stub)])
    assert len(stub.requests) == 1 and err.attempts == 1
    assert err.status_code == status and not err.retryable
    message = str(err)
    assert "stub-coder" in message and stub.base_url in message and f"HTTP {status}" in message
    assert "bad credentials: Bearer [redacted]" in message
    assert_no_key(err, err.args, client, caplog.text)
    assert err.__cause__ is None and err.__context__ is None  # the SDK error (it holds the request) is not chained


def test_timeout_retried_then_llm_error(stub: OpenAIStub) -> None:
    stub.push(Reply.delay(3.0), Reply.delay(3.0))
    started = time.monotonic()
    _, err = fail_once([spec(stub, timeout_s=0.3, max_retries=1)])
    elapsed = time.monotonic() - started
    assert err.attempts == 2 and err.retryable and err.status_code is None
    assert "timed out" in str(err)
    assert len(stub.requests) == 2
    assert 0.55 <= elapsed < 2.0


def test_timeout_then_success(stub: OpenAIStub) -> None:
    stub.push(Reply.delay(3.0), Reply.ok("on time"))
    out = complete_once([spec(stub, timeout_s=0.3)])
    assert out.text == "on time" and out.attempts == 2


def test_connection_refused_is_retried() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = ModelSpec(name="nobody-home", base_url=f"http://127.0.0.1:{port}/v1", api_key_env=KEY_ENV, max_retries=2)
    _, err = fail_once([model])
    assert err.attempts == 3 and err.retryable and "connection error" in str(err)
    assert f"127.0.0.1:{port}" in str(err)
    assert_no_key(err)


# -- concurrency and budget -------------------------------------------------------------------------------


def test_concurrency_limit(stub: OpenAIStub) -> None:
    stub.default = Reply.delay(0.15, "slow")

    async def body(client: LLMClient) -> list[Completion]:
        return await asyncio.gather(*(client.complete(MESSAGES) for _ in range(6)))

    outs = run_with([spec(stub)], body, concurrency=2)
    assert len(outs) == 6 and all(o.text == "slow" for o in outs)
    assert stub.max_in_flight == 2  # never more than 2, and the 2 slots were really used in parallel


def test_token_budget_stops_before_sending(stub: OpenAIStub) -> None:
    budget = Budget(max_tokens_total=30)  # each default reply is 10 + 5 tokens

    async def body(client: LLMClient) -> None:
        await client.complete(MESSAGES)
        assert not budget.exhausted
        await client.complete(MESSAGES)
        assert budget.exhausted
        with pytest.raises(BudgetExhausted):
            await client.complete(MESSAGES)

    run_with([spec(stub)], body, budget=budget)
    assert len(stub.requests) == 2 and budget.tokens_used == 30


def test_money_budget_stops_before_sending(stub: OpenAIStub) -> None:
    budget = Budget(max_cost_usd=0.015)
    model = spec(stub, price_in_per_mtok=1000.0)  # 10 prompt tokens -> $0.01 a call

    async def body(client: LLMClient) -> None:
        await client.complete(MESSAGES)
        await client.complete(MESSAGES)
        with pytest.raises(BudgetExhausted, match="budget exhausted"):
            await client.complete(MESSAGES)

    run_with([model], body, budget=budget)
    assert len(stub.requests) == 2 and budget.cost_used_usd == pytest.approx(0.02)


def test_budget_checked_by_calls_waiting_for_a_slot(stub: OpenAIStub) -> None:
    stub.default = Reply.delay(0.1)
    budget = Budget(max_tokens_total=15)

    async def body(client: LLMClient) -> list[Any]:
        return await asyncio.gather(*(client.complete(MESSAGES) for _ in range(3)), return_exceptions=True)

    results = run_with([spec(stub)], body, budget=budget, concurrency=1)
    assert isinstance(results[0], Completion)
    assert all(isinstance(r, BudgetExhausted) for r in results[1:])
    assert len(stub.requests) == 1


# -- the ensemble -----------------------------------------------------------------------------------------


def ensemble(stub: OpenAIStub) -> list[ModelSpec]:
    return [spec(stub, "model-a", weight=3.0), spec(stub, "model-b", weight=1.0)]


def choices(stub: OpenAIStub, seed: int, n: int = 400) -> list[str]:
    async def body(client: LLMClient) -> list[str]:
        outs = await asyncio.gather(*(client.complete(MESSAGES) for _ in range(n)))
        return [o.model for o in outs]

    return run_with(ensemble(stub), body, seed=seed, concurrency=16)


def test_weighted_ensemble_is_proportional_and_reproducible(stub: OpenAIStub) -> None:
    first = choices(stub, seed=7)
    counts = Counter(first)
    assert set(counts) == {"model-a", "model-b"}
    assert 260 <= counts["model-a"] <= 340  # expected 300, sd ~8.7
    assert Counter(stub.models_seen()) == counts  # what the server was asked matches what was reported

    assert choices(stub, seed=7) == first  # same seed, same sequence (whatever order the answers came in)
    assert choices(stub, seed=8) != first


def test_rng_key_fixes_the_choice(stub: OpenAIStub) -> None:
    async def body(client: LLMClient) -> list[str]:
        return [(await client.complete(MESSAGES, rng_key=f"gen3/island{i % 5}")).model for i in range(20)]

    picks = run_with(ensemble(stub), body, seed=1)
    assert all(picks[i] == picks[i % 5] for i in range(20))
    client = LLMClient(ensemble(stub), seed=1)
    assert [client.pick(f"gen3/island{i}").name for i in range(5)] == picks[:5]


def test_zero_weight_model_is_never_chosen(stub: OpenAIStub) -> None:
    client = LLMClient([spec(stub, "on", weight=1.0), spec(stub, "off", weight=0.0)])
    assert {client.pick(i).name for i in range(200)} == {"on"}


# -- hygiene ----------------------------------------------------------------------------------------------


def test_key_never_exposed(stub: OpenAIStub) -> None:
    stub.push(Reply.ok("fine"), Reply.error(401, "Incorrect API key provided: {authorization}"))
    model = spec(stub)
    holder: dict[str, Any] = {}

    async def body(client: LLMClient) -> None:
        holder["out"] = await client.complete(MESSAGES)
        holder["repr"] = repr(client)
        with pytest.raises(LLMError) as info:
            await client.complete(MESSAGES)
        holder["err"] = info.value
        with pytest.raises(TypeError):
            pickle.dumps(client)

    run_with([model], body, budget=Budget(max_tokens_total=10**6))
    assert stub.requests[1].headers["authorization"] == f"Bearer {KEY}"  # the server really got it...
    out, err = holder["out"], holder["err"]
    assert_no_key(model, out, holder["repr"], err, err.args, vars(err), vars(out))  # ...nobody else did
    assert KEY_ENV in repr(model)
    assert "[redacted]" in str(err)


def test_model_spec_validation() -> None:
    with pytest.raises(ValueError):
        ModelSpec(name="m", weight=-1)
    with pytest.raises(ValueError):
        LLMClient([ModelSpec(name="m", base_url="http://x/v1", weight=0.0)])
    with pytest.raises(ValueError):
        LLMClient([ModelSpec(name="m", base_url="http://x/v1"), ModelSpec(name="m", base_url="http://y/v1")])


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": " 0.5 "}) == 0.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": formatdate(now + 30, usegmt=True)}, now=now) == pytest.approx(30)
    assert parse_retry_after({"retry-after": formatdate(now - 30, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "inf"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None


def test_each_child_is_sampled_with_its_own_reproducible_seed(stub: OpenAIStub) -> None:
    """Siblings share a prompt; the per-child sampling seed is what gives each its own answer on a seeded server
    (vLLM, SGLang, ...), and the same child the same answer again. `send_seed=False` leaves it out."""

    async def body(client: LLMClient) -> None:
        for key in ("r1c0", "r1c1", "r1c0"):
            await client.complete(MESSAGES, rng_key=key)
        client.models = [spec(stub, send_seed=False)]
        await client.complete(MESSAGES, rng_key="r1c0")

    run_with([spec(stub)], body, seed=7)
    seeds = [r.body.get("seed") for r in stub.requests]
    assert isinstance(seeds[0], int) and 0 <= seeds[0] < 2**31
    assert seeds[0] == seeds[2] != seeds[1] and seeds[3] is None
