"""Aborts by rid prefix, the three pause modes, and weight versions, over real HTTP.

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


async def wait_until(client: httpx.AsyncClient, url: str, condition: Callable[[dict[str, int]], bool]) -> dict[str, int]:
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


def assert_aborted_midway(reply: dict[str, Any], max_new_tokens: int = 400) -> None:
    meta = reply["meta_info"]
    assert meta["finish_reason"]["type"] == "abort", meta["finish_reason"]
    assert {"message", "status_code", "err_type"} <= set(meta["finish_reason"])
    assert 0 < meta["completion_tokens"] < max_new_tokens
    assert len(meta["output_token_logprobs"]) == len(reply["output_ids"]) == meta["completion_tokens"]


async def test_abort_matches_rid_prefix_only(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        first = asyncio.create_task(post(client, server.url, "/generate", long_request("run1-t0001-a01-9f3c")))
        second = asyncio.create_task(post(client, server.url, "/generate", long_request("run1-t0002-a01-1b2d")))
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 2)

        assert (await post(client, server.url, "/abort_request", {"rid": "run1-t0001"}))["aborted"] == 1
        assert_aborted_midway(await first)
        assert not second.done()
        load = await loads(client, server.url)
        assert load["num_running_reqs"] == 1

        # A prefix shared by both matches the remaining one too.
        assert (await post(client, server.url, "/abort_request", {"rid": "run1-"}))["aborted"] == 1
        assert_aborted_midway(await second)


async def test_abort_all_and_empty_rid_is_a_no_op(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    async with httpx.AsyncClient(timeout=120) as client:
        tasks = [asyncio.create_task(post(client, server.url, "/generate", long_request(f"r{i}"))) for i in range(2)]
        await wait_until(client, server.url, lambda load: load["num_running_reqs"] == 2)
        assert (await post(client, server.url, "/abort_request", {"rid": ""}))["aborted"] == 0
        assert (await post(client, server.url, "/abort_request", {"abort_all": True}))["aborted"] == 2
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


async def test_abort_of_a_held_request_returns_no_tokens(policy_server) -> None:
    server = policy_server("tiny-lm")
    async with httpx.AsyncClient(timeout=120) as client:
        await post(client, server.url, "/pause_generation", {"mode": "in_place"})
        held = asyncio.create_task(post(client, server.url, "/generate", long_request("held-1")))
        await wait_until(client, server.url, lambda load: load["num_waiting_reqs"] == 1)
        await post(client, server.url, "/abort_request", {"rid": "held-1"})
        reply = await held
        assert reply["meta_info"]["finish_reason"]["type"] == "abort"
        assert reply["output_ids"] == [] and reply["meta_info"]["output_token_logprobs"] == []


async def stream_lengths(client: httpx.AsyncClient, url: str, body: dict[str, Any], out: list[int]) -> dict[str, Any]:
    last: dict[str, Any] = {}
    async with client.stream("POST", url + "/generate", json={**body, "stream": True}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                last = json.loads(line[len("data: "):])
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
        frozen_at = len(lengths)
        await post(client, server.url, "/update_weight_version", {"new_version": "v2"})
        await post(client, server.url, "/continue_generation")
        final = await task
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 30}
    assert final["meta_info"]["weight_version"] == "v2"
    assert lengths == sorted(lengths) and 3 <= frozen_at < 30  # never restarted
    reference = await_reference(server.url, body)
    assert final["output_ids"] == reference


async def test_pause_retract_restarts_from_prompt(policy_server) -> None:
    server = policy_server("tiny-lm", faults=SLOW)
    body = long_request("rt-1", max_new_tokens=30, seed=4)
    async with httpx.AsyncClient(timeout=120) as client:
        lengths: list[int] = []
        task = asyncio.create_task(stream_lengths(client, server.url, body, lengths))
        await streamed_at_least(lengths, 3)
        await post(client, server.url, "/pause_generation", {"mode": "retract"})
        assert (await loads(client, server.url))["num_waiting_reqs"] == 1
        await post(client, server.url, "/continue_generation")
        final = await task
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 30}
    # The stream starts over from the prompt: its length drops back to one token.
    drops = [i for i in range(1, len(lengths)) if lengths[i] < lengths[i - 1]]
    assert len(drops) == 1 and lengths[drops[0]] == 1 and lengths[drops[0] - 1] >= 3, lengths
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
        await post(client, server.url, "/update_weight_version", {"new_version": "step-2", "abort_all_requests": True})
        aborted = await running
        assert_aborted_midway(aborted)
        assert aborted["meta_info"]["weight_version"] == "step-2"


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
        reply = await post(client, server.url, "/update_weights_from_disk", {"model_path": "/ckpt/step-5", "weight_version": "5"})
        assert reply["success"] is True
        assert (await client.get(server.url + "/get_weight_version")).json() == {"weight_version": "5"}
        assert (await client.post(server.url + "/flush_cache")).status_code == 200
        await post(client, server.url, "/update_weights_from_disk", {"model_path": "/ckpt/step-6"})
        assert (await client.get(server.url + "/get_weight_version")).json() == {"weight_version": "5"}
        short = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 1}}
        assert (await post(client, server.url, "/generate", short))["meta_info"]["weight_version"] == "5"
