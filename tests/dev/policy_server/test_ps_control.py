"""Exact-rid aborts, the three pause modes, and weight versions (spans), over real HTTP, as SGLang 0.5.23.

Requests are kept in flight with the delay_per_token fault knob; the tests wait
for states through /v1/loads (never on wall-clock time).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx

PROMPT = [9707, 11, 1879, 0]
SLOW = {"delay_per_token": 0.02}


def long_request(rid: str, max_new_tokens: int = 400, seed: int = 1) -> dict[str, Any]:
    return {
        "rid": rid,
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": max_new_tokens, "sampling_seed": seed, "ignore_eos": True},
        "return_logprob": True,
    }


async def loads(client: httpx.AsyncClient, url: str) -> dict[str, int]:
    entry: dict[str, int] = (await client.get(url + "/v1/loads")).json()["loads"][0]
    return entry


async def wait_until(
    client: httpx.AsyncClient, url: str, condition: Callable[[dict[str, int]], bool]
) -> dict[str, int]:
    for _ in range(1000):
        load = await loads(client, url)
        if condition(load):
            return load
        await asyncio.sleep(0.02)
    raise AssertionError(f"load never reached the expected state; last: {load}")


async def post(client: httpx.AsyncClient, url: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = await client.post(url + path, json=body if body is not None else {})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def control(client: httpx.AsyncClient, url: str, path: str, body: dict[str, Any] | None = None) -> None:
    """A control route that answers SGLang's empty 200 (/abort_request)."""
    response = await client.post(url + path, json=body if body is not None else {})
    assert response.status_code == 200 and response.content == b"", response.text


def assert_aborted_midway(reply: dict[str, Any], max_new_tokens: int = 400) -> None:
    meta = reply["meta_info"]
    assert meta["finish_reason"]["type"] == "abort", meta["finish_reason"]
    assert {"message", "status_code", "err_type"} <= set(meta["finish_reason"])
    # An abort lands between two tokens, or before the first on a busy machine (a queued step is dropped).
    assert 0 <= meta["completion_tokens"] < max_new_tokens
    assert len(meta["output_token_logprobs"]) == len(reply["output_ids"]) == meta["completion_tokens"]


async def test_abort_matches_the_exact_rid_only(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        first = asyncio.create_task(post(client, server.url, "/generate", long_request("run1-t0001-a01-9f3c")))
        second = asyncio.create_task(post(client, server.url, "/generate", long_request("run1-t0002-a01-1b2d")))
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 2)

        # A prefix is dropped silently at SGLang's HTTP layer: empty 200, nothing aborted.
        await control(client, server.url, "/abort_request", {"rid": "run1-t0001"})
        await control(client, server.url, "/abort_request", {"rid": "run1-"})
        assert (await loads(client, server.url))["num_running_reqs"] == 2

        await control(client, server.url, "/abort_request", {"rid": "run1-t0001-a01-9f3c"})
        assert_aborted_midway(await first)
        assert not second.done()
        assert (await loads(client, server.url))["num_running_reqs"] == 1
        await control(client, server.url, "/abort_request", {"rid": "run1-t0002-a01-1b2d"})
        assert_aborted_midway(await second)


async def test_abort_all_and_empty_rid_is_a_no_op(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        tasks = [asyncio.create_task(post(client, server.url, "/generate", long_request(f"r{i}"))) for i in range(2)]
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 2)
        await control(client, server.url, "/abort_request", {"rid": ""})
        assert (await loads(client, server.url))["num_running_reqs"] == 2
        await control(client, server.url, "/abort_request", {"abort_all": True})
        for task in tasks:
            assert_aborted_midway(await task)
        assert (await loads(client, server.url))["num_total_reqs"] == 0


async def test_pause_abort_aborts_in_flight_and_holds_new_requests(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        running = asyncio.create_task(post(client, server.url, "/generate", long_request("p-1")))
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 1)
        await post(client, server.url, "/pause_generation", {"mode": "abort"})
        assert_aborted_midway(await running)

        held = asyncio.create_task(post(client, server.url, "/generate", long_request("p-2", max_new_tokens=3)))
        await wait_until(client, server.url, lambda load: load["num_waiting_reqs"] == 1)
        assert not held.done()
        await post(client, server.url, "/continue_generation")
        reply = await held
        assert reply["meta_info"]["finish_reason"] == {"type": "length", "length": 3}


async def test_an_abort_of_a_request_held_at_the_pause_gate_is_lost(policy_server) -> None:
    """SGLang 0.5.23: a request that arrives during a pause waits at the tokenizer's gate,
    unseen by the scheduler, so its exact-rid abort does nothing; the rid is marked, so a
    second abort after continue is ignored too. /ready answers 503 while paused."""
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        assert (await client.get(server.url + "/ready")).status_code == 200
        await post(client, server.url, "/pause_generation", {"mode": "in_place"})
        assert (await client.get(server.url + "/ready")).status_code == 503
        held = asyncio.create_task(post(client, server.url, "/generate", long_request("held-1", max_new_tokens=6)))
        await wait_until(client, server.url, lambda load: load["num_waiting_reqs"] == 1)
        await control(client, server.url, "/abort_request", {"rid": "held-1"})
        await post(client, server.url, "/continue_generation")
        assert (await client.get(server.url + "/ready")).status_code == 200
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 1)
        await control(client, server.url, "/abort_request", {"rid": "held-1"})
        reply = await held
    assert reply["meta_info"]["finish_reason"] == {"type": "length", "length": 6}


async def stream_lengths(client: httpx.AsyncClient, url: str, body: dict[str, Any], out: list[int]) -> dict[str, Any]:
    last: dict[str, Any] = {}
    async with client.stream("POST", url + "/generate", json={**body, "stream": True}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                last = json.loads(line[len("data: ") :])
                out.append(len(last["output_ids"]))
    return last


async def test_pause_in_place_freezes_and_resumes(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    body = long_request("ip-1", max_new_tokens=30, seed=4)
    async with httpx.AsyncClient(timeout=120) as client:
        lengths: list[int] = []
        task = asyncio.create_task(stream_lengths(client, server.url, body, lengths))
        await streamed_at_least(lengths, 3)
        await post(client, server.url, "/pause_generation", {"mode": "in_place"})
        load = await loads(client, server.url)
        assert load["num_running_reqs"] == 0 and load["num_waiting_reqs"] == 1
        frozen_at = (await loads(client, server.url))["num_used_tokens"] - len(PROMPT)
        # Without abort_all_requests: False, SGLang's default would abort the frozen request.
        await post(client, server.url, "/update_weight_version", {"new_version": "v2", "abort_all_requests": False})
        await post(client, server.url, "/continue_generation")
        final = await task
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 30}
    assert final["meta_info"]["weight_version"] == "v2"
    assert lengths == sorted(lengths) and 3 <= frozen_at < 30  # never restarted
    # The tokens before the update carry the old version, the rest the new one.
    assert final["meta_info"]["weight_versions"] == [
        {"version": "default", "start": 0, "end": frozen_at},
        {"version": "v2", "start": frozen_at, "end": 30},
    ]
    reference = await_reference(server.url, body)
    assert final["output_ids"] == reference


async def test_abort_during_in_place_pause_lands_after_continue(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        lengths: list[int] = []
        task = asyncio.create_task(stream_lengths(client, server.url, long_request("ipa-1"), lengths))
        await streamed_at_least(lengths, 3)
        await post(client, server.url, "/pause_generation", {"mode": "in_place"})
        frozen_at = (await loads(client, server.url))["num_used_tokens"] - len(PROMPT)
        await control(client, server.url, "/abort_request", {"rid": "ipa-1"})
        # The scheduler is frozen: the request is still held, with its tokens, until continue.
        assert (await loads(client, server.url))["num_waiting_reqs"] == 1
        assert (await loads(client, server.url))["num_total_reqs"] == 1 and not task.done()
        await post(client, server.url, "/continue_generation")
        final = await task
    assert final["meta_info"]["finish_reason"]["type"] == "abort"
    assert final["meta_info"]["completion_tokens"] == frozen_at  # aborted where it was frozen


async def test_pause_retract_keeps_the_partial_output_and_emits_spans(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW, weight_version="step-0")
    body = long_request("rt-1", max_new_tokens=30, seed=4)
    async with httpx.AsyncClient(timeout=120) as client:
        lengths: list[int] = []
        task = asyncio.create_task(stream_lengths(client, server.url, body, lengths))
        await streamed_at_least(lengths, 3)
        await post(client, server.url, "/pause_generation", {"mode": "retract"})
        assert (await loads(client, server.url))["num_waiting_reqs"] == 1
        kept = (await loads(client, server.url))["num_used_tokens"] - len(PROMPT)
        await post(client, server.url, "/update_weight_version", {"new_version": "step-1", "abort_all_requests": False})
        await post(client, server.url, "/continue_generation")
        final = await task
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 30}
    # SGLang re-prefills prompt + partial output: the stream never drops back.
    assert lengths == sorted(lengths) and 3 <= kept < 30
    assert final["meta_info"]["weight_version"] == "step-1"
    assert final["meta_info"]["weight_versions"] == [
        {"version": "step-0", "start": 0, "end": kept},
        {"version": "step-1", "start": kept, "end": 30},
    ]
    assert final["output_ids"] == await_reference(server.url, body)


async def streamed_at_least(lengths: list[int], count: int) -> None:
    for _ in range(1000):
        if len(lengths) >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the stream sent only {len(lengths)} chunks")


def await_reference(url: str, body: dict[str, Any]) -> list[int]:
    """The same request, undisturbed (seeded sampling makes it reproducible)."""
    reference = httpx.post(url + "/generate", json={**body, "rid": body["rid"] + "-ref"}, timeout=120).json()
    ids: list[int] = reference["output_ids"]
    return ids


async def test_weight_version_updates_and_can_abort_all(policy_server) -> None:
    server = policy_server("tiny-lm", weight_version="step-0", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        short = {**long_request("w-1", max_new_tokens=2)}
        assert (await post(client, server.url, "/generate", short))["meta_info"]["weight_version"] == "step-0"
        reply = await post(client, server.url, "/update_weight_version", {"new_version": "step-1"})
        assert reply["success"] is True and reply["new_version"] == "step-1"
        assert (await post(client, server.url, "/generate", short))["meta_info"]["weight_version"] == "step-1"
        assert (await client.get(server.url + "/get_model_info")).json()["weight_version"] == "step-1"

        running = asyncio.create_task(post(client, server.url, "/generate", long_request("w-2")))
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 1)
        # SGLang's default: abort_all_requests is True.
        await post(client, server.url, "/update_weight_version", {"new_version": "step-2"})
        aborted = await running
        assert_aborted_midway(aborted)
        assert aborted["meta_info"]["weight_version"] == "step-2"
        assert "weight_versions" not in aborted["meta_info"]  # aborted before the change: one version


async def test_client_disconnect_frees_the_request(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        task = asyncio.create_task(post(client, server.url, "/generate", long_request("gone-1")))
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    async with httpx.AsyncClient(timeout=120) as client:
        await wait_until(client, server.url, lambda load: load["num_total_reqs"] == 0)


async def test_trainer_weight_update_calls(policy_server) -> None:
    server = policy_server("null")
    async with httpx.AsyncClient(timeout=120) as client:
        reply = await post(
            client, server.url, "/update_weights_from_disk", {"model_path": "/ckpt/step-5", "weight_version": "5"}
        )
        assert reply["success"] is True
        assert (await client.get(server.url + "/get_model_info")).json()["weight_version"] == "5"
        assert (await client.post(server.url + "/flush_cache")).status_code == 200
        assert (await client.get(server.url + "/flush_cache")).status_code == 200
        await post(client, server.url, "/update_weights_from_disk", {"model_path": "/ckpt/step-6"})
        assert (await client.get(server.url + "/get_model_info")).json()["weight_version"] == "5"
        # Gone in SGLang 0.5.23, so gone here.
        assert (await client.get(server.url + "/get_weight_version")).status_code == 404
        assert (await client.get(server.url + "/get_load")).status_code == 404
        short = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1}}
        assert (await post(client, server.url, "/generate", short))["meta_info"]["weight_version"] == "5"


async def test_cached_tokens_report_prefix_reuse_and_flushes_empty_the_cache(policy_server: Any) -> None:
    """As SGLang's radix cache: a repeated long prompt reports the reused tokens in
    meta_info.cached_tokens; /flush_cache and a weight update from disk (flush_cache
    defaults to true there) empty the cache, flush_cache=false keeps it."""
    server = policy_server("tiny-lm")
    prompt = [(7 * i) % 5000 + 100 for i in range(200)]

    async def cached(client: httpx.AsyncClient) -> int:
        body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 2, "sampling_seed": 3, "ignore_eos": True}}
        reply = await post(client, server.url, "/generate", body)
        count: int = reply["meta_info"]["cached_tokens"]
        return count

    async with httpx.AsyncClient(timeout=120) as client:
        assert await cached(client) == 0
        reused = await cached(client)
        assert 0 < reused < len(prompt)  # never the last input token: its logits start the reply
        response = await client.post(server.url + "/flush_cache")
        assert response.status_code == 200, response.text
        assert await cached(client) == 0
        await post(client, server.url, "/update_weights_from_disk", {"model_path": "/nowhere", "flush_cache": False})
        assert await cached(client) == reused
        await post(client, server.url, "/update_weights_from_disk", {"model_path": "/nowhere"})
        assert await cached(client) == 0
