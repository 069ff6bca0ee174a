"""The SGLang client against real HTTP servers: retries, aborts, errors, rids."""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Callable
from typing import Any

import pytest

from agent_runner.policy.errors import ContextBudgetError, ModelProtocolError, ModelTimeoutError, ModelUnavailableError
from agent_runner.policy.sglang import SamplingParams, SGLangClient, make_rid
from swerollout.backoff import Backoff
from tests.support.runner_core_fakes import Behaviour, FakeSGLang

FAST = Backoff(attempts=4, first_seconds=0.01, max_seconds=1.0)


def _client(url: str, sleeps: list[float] | None = None, **kw: object) -> SGLangClient:
    async def record(delay: float) -> None:
        if sleeps is not None:
            sleeps.append(delay)

    return SGLangClient(url, retry=FAST, abort_timeout=1.0, rng=random.Random(0), sleep=record, **kw)  # type: ignore[arg-type]


def _rids(uid: str = "run1", turn: int = 1) -> object:
    return lambda attempt: make_rid(uid, turn, attempt)


async def test_generate_token_in_token_out(fake_sglang: FakeSGLang) -> None:
    async with _client(fake_sglang.url) as client:
        result = await client.generate([1, 2, 3], SamplingParams(max_new_tokens=7), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert result.output_ids == [11, 12, 13]
    assert result.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert result.finish == "stop" and result.weight_version == "w1" and result.attempts == 1
    sent = fake_sglang.requests[0]
    assert sent["input_ids"] == [1, 2, 3] and sent["return_logprob"] is True
    assert sent["sampling_params"]["max_new_tokens"] == 7
    assert sent["sampling_params"]["skip_special_tokens"] is False
    assert "return_routed_experts" not in sent
    assert sent["rid"].startswith("run1-t0001-a01-")


async def test_routed_experts_decoded_from_the_start_asked(fake_sglang: FakeSGLang) -> None:
    fake_sglang.routed_width = 2
    async with _client(fake_sglang.url) as client:
        result = await client.generate(
            [1, 2, 3, 4],
            SamplingParams(),
            rid_for_attempt=_rids(),
            return_routed_experts=True,  # type: ignore[arg-type]
            routed_experts_start_len=2,
        )
    assert fake_sglang.requests[0]["return_routed_experts"] is True
    # seqlen 4 + 3 outputs = 7; rows for positions 2..5 (seqlen - 1 - start = 4 rows)
    assert result.routed_experts is not None
    values = [
        int.from_bytes(result.routed_experts[i : i + 4], "little") for i in range(0, len(result.routed_experts), 4)
    ]
    assert values == [20, 21, 30, 31, 40, 41, 50, 51]


async def test_other_field_spellings_are_accepted(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script.append(
        Behaviour(
            body={
                "text": "x",
                "token_ids": [4, 5],
                "meta_info": {
                    "model_version": 3,
                    "finish_reason": "length",
                    "output_token_logprobs": [[-1.0, 4], [-2.0, 5]],
                },
            }
        )
    )
    async with _client(fake_sglang.url) as client:
        result = await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert (result.output_ids, result.finish, result.weight_version) == ([4, 5], "length", "3")


async def test_abort_is_a_result_not_an_error(fake_sglang: FakeSGLang) -> None:
    body = fake_sglang.answer({"rid": "x", "input_ids": [1]}, [7, 8], finish="abort")
    body["meta_info"]["output_token_logprobs"] = [[-0.5, 7, None]]  # shorter, as SGLang may send
    fake_sglang.script.append(Behaviour(body=body))
    async with _client(fake_sglang.url) as client:
        result = await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert result.finish == "abort" and result.output_ids == [7, 8] and not result.aligned
    assert result.abort_message == "aborted"
    assert len(fake_sglang.requests) == 1  # not retried


async def test_5xx_then_success_retries_with_a_new_rid(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script += [Behaviour("status", 500), Behaviour("status", 503)]
    sleeps: list[float] = []
    async with _client(fake_sglang.url, sleeps) as client:
        result = await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    rids = [r["rid"] for r in fake_sglang.requests]
    assert len(rids) == 3 and len(set(rids)) == 3
    assert [r.split("-")[2] for r in rids] == ["a01", "a02", "a03"]
    assert result.rid == rids[-1] and result.attempts == 3
    assert len(sleeps) == 2 and all(0 <= s <= FAST.max_seconds for s in sleeps)


async def test_429_honours_retry_after(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script.append(Behaviour("status", 429, headers={"Retry-After": "0.75"}))
    sleeps: list[float] = []
    async with _client(fake_sglang.url, sleeps) as client:
        await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert sleeps == [pytest.approx(0.75)]


async def test_dropped_connection_aborts_old_rid_before_resending(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script.append(Behaviour("drop"))
    async with _client(fake_sglang.url) as client:
        result = await client.generate([1, 2], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    first, second = (r["rid"] for r in fake_sglang.requests)
    assert fake_sglang.aborted == [first]
    assert result.rid == second != first
    assert result.output_ids == [11, 12, 13]  # only the accepted answer comes back


async def test_timeout_aborts_and_gives_up_with_timeout_error(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script += [Behaviour("hang"), Behaviour("hang")]
    client = SGLangClient(
        fake_sglang.url, retry=Backoff(attempts=2, first_seconds=0.001), abort_timeout=1.0, timeout=0.3
    )
    async with client:
        with pytest.raises(ModelTimeoutError, match="failed 2 times"):
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert fake_sglang.aborted == [r["rid"] for r in fake_sglang.requests]


async def test_persistent_5xx_gives_up_after_bounded_attempts(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script += [Behaviour("status", 502)] * 10
    async with _client(fake_sglang.url) as client:
        with pytest.raises(ModelUnavailableError, match="HTTP 502") as info:
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert len(fake_sglang.requests) == FAST.attempts
    assert info.value.retryable


async def test_404_says_it_is_not_sglang(fake_sglang: FakeSGLang) -> None:
    async with _client(fake_sglang.url + "/v1") as client:
        with pytest.raises(
            ModelProtocolError, match=r"is this an SGLang server\? /generate not found at .*/v1/generate"
        ) as info:
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert not info.value.retryable


async def test_400_is_not_retried(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script.append(Behaviour("status", 400, body="input_ids too long"))
    async with _client(fake_sglang.url) as client:
        with pytest.raises(ModelProtocolError, match="input_ids too long"):
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert len(fake_sglang.requests) == 1


async def test_connection_refused_names_the_url(free_port_url: str) -> None:
    async with _client(free_port_url) as client:
        with pytest.raises(ModelUnavailableError, match=f"cannot connect to SGLang at {free_port_url}"):
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
        assert await client.health() is False


async def test_health_and_abort(fake_sglang: FakeSGLang) -> None:
    async with _client(fake_sglang.url) as client:
        assert await client.health() is True
        await client.abort("run1-t0001-a01-deadbeef.")
    assert fake_sglang.aborted == ["run1-t0001-a01-deadbeef."]


async def test_malformed_body_is_a_protocol_error(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script.append(Behaviour(body={"hello": "world"}))
    async with _client(fake_sglang.url) as client:
        with pytest.raises(ModelProtocolError, match="not an SGLang /generate response"):
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]


def test_rids_are_never_prefixes_of_each_other() -> None:
    # Adversarial uids: one uid is a prefix of another, and one looks like a whole rid.
    uids = ["a", "a-t0001", "a-t0001-a01", "ab", "run/1", "run 1", "", "x" * 40]
    rids = [make_rid(u, t, a) for u, t, a in itertools.product(uids, [0, 1, 7, 12345], [1, 2, 10])]
    rids += [make_rid("a", 1, 1) for _ in range(200)]
    assert len(set(rids)) == len(rids)
    for one, other in itertools.permutations(rids, 2):
        assert not other.startswith(one), (one, other)
    assert all(r.count(".") == 1 and r.endswith(".") for r in rids)
    assert make_rid("uid-9", 7, 1).startswith("uid-9-t0007-a01-")
    assert all(make_rid(u, 3, 1).startswith((re.sub(r"[^A-Za-z0-9-]", "-", u) or "run") + "-t0003-") for u in uids)


async def test_cancelled_generate_aborts_its_rid(fake_sglang: FakeSGLang) -> None:
    import asyncio

    fake_sglang.script.append(Behaviour("hang"))
    async with _client(fake_sglang.url) as client:
        task = asyncio.create_task(client.generate([1], SamplingParams(), rid_for_attempt=_rids()))  # type: ignore[arg-type]
        while not fake_sglang.requests:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert fake_sglang.aborted == [fake_sglang.requests[0]["rid"]]


async def test_abort_by_rid_against_the_policy_server(oracle_server: Callable[..., Any]) -> None:
    import asyncio

    from swerollout.tokenizers import load_tokenizer

    server = oracle_server(weight_version="w9", faults={"delay_per_token": 0.02})
    tok = load_tokenizer("qwen-2.5")
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "Task demo__greet-1"}], tokenize=False, add_generation_prompt=True
    )
    ids = tok.encode(prompt, add_special_tokens=False)
    rid = make_rid("uid-live", 1, 1)
    async with SGLangClient(server.url, retry=FAST, abort_timeout=1.0) as client:
        assert await client.health()
        task = asyncio.create_task(
            client.generate(ids, SamplingParams(max_new_tokens=400), rid_for_attempt=lambda _: rid)
        )
        await asyncio.sleep(0.3)
        await client.abort(rid)
        result = await task
    assert result.finish == "abort" and result.rid == rid
    assert 0 < len(result.output_ids) < 400 and result.weight_version == "w9"


async def test_oracle_server_round_trip_with_text_spellings(oracle_server: Callable[..., Any]) -> None:
    from swerollout.tokenizers import load_tokenizer

    server = oracle_server()
    tok = load_tokenizer("qwen-2.5")
    ids = tok.encode(
        tok.apply_chat_template(
            [{"role": "user", "content": "Task demo__greet-1"}], tokenize=False, add_generation_prompt=True
        ),
        add_special_tokens=False,
    )
    async with SGLangClient(server.url, retry=FAST, abort_timeout=1.0) as client:
        result = await client.generate(
            ids, SamplingParams(max_new_tokens=400, temperature=0.0), rid_for_attempt=_rids()
        )  # type: ignore[arg-type]
    assert result.finish == "stop" and result.aligned
    assert result.output_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
    assert "git apply" in tok.decode(result.output_ids)


async def test_abort_in_flight_names_the_exact_rid(fake_sglang: FakeSGLang) -> None:
    import asyncio

    fake_sglang.script.append(Behaviour("hang"))
    async with _client(fake_sglang.url) as client:
        task = asyncio.create_task(client.generate([1], SamplingParams(), rid_for_attempt=_rids()))  # type: ignore[arg-type]
        while not fake_sglang.requests:
            await asyncio.sleep(0.01)
        assert client.in_flight == [fake_sglang.requests[0]["rid"]]
        assert await client.abort_in_flight() == 1
        result = await asyncio.wait_for(task, 10)
    # The fake ends a request only when its exact rid is aborted, as SGLang's HTTP layer does.
    assert fake_sglang.aborted == [fake_sglang.requests[0]["rid"]]
    assert result.finish == "abort" and client.in_flight == []


async def test_abort_while_waiting_to_retry_sends_nothing_more(fake_sglang: FakeSGLang) -> None:
    import asyncio

    fake_sglang.script.append(Behaviour("status", 503))
    backoff_started = asyncio.Event()

    async def long_sleep(delay: float) -> None:
        backoff_started.set()
        await asyncio.sleep(60)

    client = SGLangClient(fake_sglang.url, retry=FAST, abort_timeout=1.0, rng=random.Random(0), sleep=long_sleep)
    async with client:
        task = asyncio.create_task(client.generate([1], SamplingParams(), rid_for_attempt=_rids()))  # type: ignore[arg-type]
        await asyncio.wait_for(backoff_started.wait(), 10)
        assert await client.abort_in_flight() == 0  # nothing on the server: the 503 ended it
        result = await asyncio.wait_for(task, 10)
    assert result.finish == "abort" and result.output_ids == []
    assert len(fake_sglang.requests) == 1 and fake_sglang.aborted == []


async def test_null_logprob_is_an_error_of_the_turn_never_zero(fake_sglang: FakeSGLang) -> None:
    body = fake_sglang.answer({"rid": "x", "input_ids": [1]}, [5, 6])
    body["meta_info"]["output_token_logprobs"][1][0] = None  # SGLang's encoding of -inf / nan
    fake_sglang.script += [Behaviour(body=body)] * FAST.attempts
    async with _client(fake_sglang.url) as client:
        with pytest.raises(ModelProtocolError, match=r"null \(non-finite\) logprob for output token 1 \(id 6"):
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    rids = [r["rid"] for r in fake_sglang.requests]
    assert len(rids) == FAST.attempts and len(set(rids)) == FAST.attempts  # retried, each with a new rid


async def test_null_logprob_then_a_good_answer_is_accepted(fake_sglang: FakeSGLang) -> None:
    body = fake_sglang.answer({"rid": "x", "input_ids": [1]}, [5])
    body["meta_info"]["output_token_logprobs"][0][0] = None
    fake_sglang.script.append(Behaviour(body=body))
    async with _client(fake_sglang.url) as client:
        result = await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert result.attempts == 2 and result.logprobs == pytest.approx([-0.1, -0.2, -0.3])


@pytest.mark.parametrize(
    "message",
    [
        "The input (40 tokens) is longer than the model's context length (32 tokens).",
        "Input length (40 tokens) exceeds the maximum allowed length (26 tokens). Use a shorter input or enable --allow-auto-truncate.",
    ],
)
async def test_too_long_prompt_400_is_a_context_error(fake_sglang: FakeSGLang, message: str) -> None:
    fake_sglang.script.append(Behaviour("status", 400, body=json.dumps({"error": {"message": message}})))
    async with _client(fake_sglang.url) as client:
        with pytest.raises(ContextBudgetError, match=re.escape(message)):
            await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert len(fake_sglang.requests) == 1


async def test_spans_give_per_token_versions_and_default_means_unset(fake_sglang: FakeSGLang) -> None:
    body = fake_sglang.answer({"rid": "x", "input_ids": [1]}, [5, 6, 7, 8])
    body["meta_info"]["weight_version"] = "v2"
    body["meta_info"]["weight_versions"] = [
        {"version": "default", "start": 0, "end": 1},
        {"version": "v1", "start": 1, "end": 3},
        {"version": "v2", "start": 3, "end": 4},
    ]
    fake_sglang.script.append(Behaviour(body=body))
    async with _client(fake_sglang.url) as client:
        result = await client.generate([1], SamplingParams(), rid_for_attempt=_rids())  # type: ignore[arg-type]
    assert result.token_versions == [None, "v1", "v1", "v2"] and result.weight_version == "v2"


async def test_limits_from_server_info(fake_sglang: FakeSGLang) -> None:
    async with _client(fake_sglang.url) as client:
        assert await client.limits() is None  # this server hides them
        fake_sglang.server_info = {"context_length": 4096, "max_total_num_tokens": 100_000, "max_req_input_len": 4090}
        limits = await client.limits()
    assert limits is not None and (limits.context_length, limits.max_req_len) == (4096, 4095)
    assert limits.prompt_fits(4089) and not limits.prompt_fits(4090)
    assert limits.max_new_tokens(4000) == 94  # max_req_len - prompt - 1


async def test_requests_carry_sglang_field_names(fake_sglang: FakeSGLang) -> None:
    async with _client(fake_sglang.url) as client:
        await client.generate(
            [1, 2],
            SamplingParams(max_new_tokens=5, top_k=20, stop=["</x>"], sampling_seed=7),
            rid_for_attempt=_rids(),
            return_routed_experts=True,
            routed_experts_start_len=9,  # type: ignore[arg-type]
        )
    sent = fake_sglang.requests[0]
    assert sent["logprob_start_len"] == -1 and sent["routed_experts_start_len"] == 9
    assert sent["sampling_params"] == {
        "max_new_tokens": 5,
        "top_k": 20,
        "stop": ["</x>"],
        "sampling_seed": 7,
        "skip_special_tokens": False,
    }


async def test_an_abort_while_the_server_is_paused_closes_the_request_instead(
    oracle_server: Callable[..., Any],
) -> None:
    """SGLang 0.5.23 loses an exact-rid abort of a request held at its pause gate and then
    ignores every later abort of the rid: the client sends none while /ready says 503; it
    closes the request's connection and the call ends as aborted at once."""
    import asyncio

    import httpx

    server = oracle_server()
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as http,
        SGLangClient(server.url, retry=FAST, abort_timeout=1.0) as client,
    ):
        (await http.post("/pause_generation", json={"mode": "in_place"})).raise_for_status()
        turn = asyncio.create_task(
            client.generate([1, 2, 3], SamplingParams(max_new_tokens=5), rid_for_attempt=_rids())  # type: ignore[arg-type]
        )
        while (await http.get("/v1/loads")).json()["loads"][0]["num_waiting_reqs"] < 1:
            await asyncio.sleep(0.05)
        assert await client.paused()
        assert await client.abort_in_flight() == 0  # no rid sent: it would be lost
        result = await asyncio.wait_for(turn, timeout=30)
        assert result.finish == "abort" and result.output_ids == []
        assert result.abort_message is not None and "paused" in result.abort_message
        (await http.post("/continue_generation", json={})).raise_for_status()
        assert not await client.paused()


async def test_keys_go_where_sglang_asks_them(oracle_server: Callable[..., Any]) -> None:
    """A server with --api-key and --admin-api-key (the stand-in decides as SGLang does):
    /generate carries the API key, /abort_request the admin key, and the abort lands by rid.
    A client without the admin key is refused the abort and closes the request instead."""
    import asyncio

    import httpx

    server = oracle_server(api_key="k-api", admin_api_key="k-admin", faults={"delay_per_token": 0.05})
    async with SGLangClient(server.url, retry=FAST, abort_timeout=1.0) as keyless:
        with pytest.raises(ModelProtocolError, match="HTTP 401"):
            await keyless.generate([1, 2, 3], SamplingParams(max_new_tokens=5), rid_for_attempt=_rids())  # type: ignore[arg-type]
    headers = {"Authorization": "Bearer k-api"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:

        async def running() -> int:
            return int((await http.get("/v1/loads")).json()["loads"][0]["num_running_reqs"])

        for admin_key, delivered in (("k-admin", 1), (None, 0)):
            async with SGLangClient(
                server.url, retry=FAST, abort_timeout=1.0, api_key="k-api", admin_key=admin_key
            ) as client:
                turn = asyncio.create_task(
                    client.generate([1, 2, 3], SamplingParams(max_new_tokens=400), rid_for_attempt=_rids())  # type: ignore[arg-type]
                )
                while await running() < 1:
                    await asyncio.sleep(0.05)
                assert await client.abort_in_flight() == delivered
                result = await asyncio.wait_for(turn, timeout=30)
            assert result.finish == "abort" and len(result.output_ids) < 400, admin_key
            if delivered:
                assert result.abort_message == "Abort requested"  # the server's own abort, by rid
            else:
                assert result.abort_message is not None and "no admin key" in result.abort_message
            # Either way the server stops generating it (a closed connection is aborted too).
            deadline = asyncio.get_running_loop().time() + 30
            while await running() > 0:
                assert asyncio.get_running_loop().time() < deadline, "the request kept running"
                await asyncio.sleep(0.1)
