"""Info / health / load endpoints, fault knobs, and 400s that name the bad field."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

PROMPT = [9707, 11, 1879]
GOOD = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 2}}


async def test_info_and_health_endpoints(policy_server) -> None:
    server = policy_server("null", weight_version="w7", context_length=4096)
    async with httpx.AsyncClient(timeout=60) as client:
        assert (await client.get(server.url + "/health")).status_code == 200
        assert (await client.get(server.url + "/health_generate")).status_code == 200
        model = (await client.get(server.url + "/get_model_info")).json()
        assert model["is_generation"] is True and model["weight_version"] == "w7"
        assert model["tokenizer_path"] == "qwen-2.5" and model["model_path"] == "swerollout-null"
        info = (await client.get(server.url + "/get_server_info")).json()
        assert info["policy"] == "null" and info["context_length"] == 4096 and info["weight_version"] == "w7"
        assert info["paused"] is None
        await client.post(server.url + "/pause_generation", json={"mode": "in_place"})
        assert (await client.get(server.url + "/get_server_info")).json()["paused"] == "in_place"
        await client.post(server.url + "/continue_generation")
        models = (await client.get(server.url + "/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["swerollout-null"]
        loads = (await client.get(server.url + "/v1/loads")).json()
        assert {"timestamp", "version", "accelerator", "num_accelerators", "loads"} <= set(loads)
        assert loads["loads"][0]["num_total_reqs"] == 0
        # The limits a client budgets with: SGLang's max_req_input_len = min(ctx-1, kv-1) - 5.
        assert info["max_req_input_len"] == 4096 - 1 - 5


async def test_load_counts_in_flight_requests(policy_server) -> None:
    import asyncio

    server = policy_server("tiny-lm", faults={"delay_per_token": 0.02})
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
    async with httpx.AsyncClient(timeout=60) as client:
        task = asyncio.create_task(client.post(server.url + "/generate", json={**body, "rid": "load-1"}))
        for _ in range(500):
            load = (await client.get(server.url + "/v1/loads")).json()["loads"][0]
            if load["num_total_reqs"] == 1 and load["num_used_tokens"] > len(PROMPT):
                break
            await asyncio.sleep(0.02)
        assert load["num_total_reqs"] == 1 and load["num_waiting_reqs"] == 0
        v1 = (await client.get(server.url + "/v1/loads")).json()["loads"][0]
        assert v1["num_running_reqs"] == 1 and v1["num_used_tokens"] > len(PROMPT)
        await client.post(server.url + "/abort_request", json={"rid": "load-1"})
        assert (await task).json()["meta_info"]["finish_reason"]["type"] == "abort"


async def test_fail_next_then_serves(policy_server) -> None:
    server = policy_server("null", faults={"fail_next": 2})
    async with httpx.AsyncClient(timeout=60) as client:
        codes = [(await client.post(server.url + "/generate", json=GOOD)).status_code for _ in range(3)]
        assert codes == [503, 503, 200]
        # The admin endpoint re-arms it, and also covers chat completions.
        faults = (await client.post(server.url + "/_standin/faults", json={"fail_next": 1})).json()
        assert faults["fail_next"] == 1
        chat = await client.post(
            server.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
        )
        assert chat.status_code == 503 and "fail_next" in chat.json()["error"]["message"]
        assert (await client.get(server.url + "/_standin/faults")).json()["fail_next"] == 0


async def error_pattern(url: str, count: int) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as client:
        return [(await client.post(url + "/generate", json=GOOD)).status_code for _ in range(count)]


async def test_error_rate_is_seeded(policy_server) -> None:
    first = policy_server("null", seed=5, faults={"error_rate": 0.5})
    second = policy_server("null", seed=5, faults={"error_rate": 0.5})
    pattern = await error_pattern(first.url, 24)
    assert set(pattern) == {200, 500}
    assert await error_pattern(second.url, 24) == pattern
    always = policy_server("null", faults={"error_rate": 1.0})
    assert await error_pattern(always.url, 3) == [500, 500, 500]


async def test_abort_after_tokens_and_delay_knobs(policy_server) -> None:
    server = policy_server("tiny-lm", faults={"abort_after_tokens": 4})
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 20}, "return_logprob": True}
    async with httpx.AsyncClient(timeout=60) as client:
        reply = (await client.post(server.url + "/generate", json=body)).json()
        assert reply["meta_info"]["finish_reason"]["type"] == "abort"
        assert len(reply["output_ids"]) == 4 == len(reply["meta_info"]["output_token_logprobs"])
        faults = (
            await client.post(
                server.url + "/_standin/faults", json={"clear_abort_after_tokens": True, "delay_per_token": 0.001}
            )
        ).json()
        assert faults["abort_after_tokens"] is None and faults["delay_per_token"] == 0.001
        reply = (await client.post(server.url + "/generate", json=body)).json()
        assert reply["meta_info"]["finish_reason"] == {"type": "length", "length": 20}


BAD_REQUESTS: list[tuple[str, Any, str]] = [
    ("/generate", {"sampling_params": {"max_new_tokens": 2}}, "input_ids"),
    ("/generate", {**GOOD, "sampling_params": {"temperature": "hot"}}, "sampling_params.temperature"),
    ("/generate", {**GOOD, "sampling_params": {"max_new_tokens": -1}}, "sampling_params.max_new_tokens"),
    ("/generate", {**GOOD, "sampling_params": {"max_tokens": 5}}, "sampling_params.max_tokens"),
    ("/generate", {**GOOD, "sampling_params": {"top_p": 0}}, "sampling_params.top_p"),
    ("/generate", {**GOOD, "sampling_params": {"seed": 3}}, "sampling_params.seed"),
    ("/generate", {**GOOD, "sampling_params": {"top_k": 0}}, "top_k"),
    ("/generate", {"input_ids": [1, 10**9]}, "input_ids"),
    ("/generate", {"input_ids": [[1, 2], [3]]}, "input_ids"),
    ("/generate", {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 5000}}, "maximum context length of 4096"),
    (
        "/generate",
        {"input_ids": [1] * 4090, "sampling_params": {"max_new_tokens": 1}},
        "exceeds the maximum allowed length (4090 tokens)",
    ),
    ("/generate", {"input_ids": [1] * 4096}, "longer than the model's context length (4096 tokens)"),
    ("/abort_request", {"rid": 5}, "rid"),
    ("/pause_generation", {"mode": "sideways"}, "mode"),
    ("/update_weight_version", {}, "new_version"),
    ("/_standin/faults", {"error_rate": 2}, "error_rate"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": True}, "stream"),
]


@pytest.mark.parametrize(("path", "body", "field"), BAD_REQUESTS, ids=[f"{p}:{f}" for p, _, f in BAD_REQUESTS])
async def test_bad_requests_are_400_naming_the_field(policy_server, path: str, body: Any, field: str) -> None:
    server = policy_server("null", context_length=4096)
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(server.url + path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert field in error["message"], error
    assert error["code"] == 400


async def test_invalid_json_and_duplicate_rid(policy_server) -> None:
    import asyncio

    server = policy_server("tiny-lm", faults={"delay_per_token": 0.02})
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(server.url + "/generate", content=b"{not json")
        assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]
        body = {"rid": "dup", "input_ids": PROMPT, "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}}
        first = asyncio.create_task(client.post(server.url + "/generate", json=body))
        for _ in range(500):
            if (await client.get(server.url + "/v1/loads")).json()["loads"][0]["num_running_reqs"] == 1:
                break
            await asyncio.sleep(0.02)
        second = await client.post(server.url + "/generate", json=body)
        assert second.status_code == 400 and "'dup' is already in flight" in second.json()["error"]["message"]
        await client.post(server.url + "/abort_request", json={"rid": "dup"})
        assert (await first).status_code == 200


def test_in_process_stop_closes_the_port(policy_server) -> None:
    server = policy_server("null")
    assert httpx.get(server.url + "/health", timeout=30).status_code == 200
    server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(server.url + "/health", timeout=5)
    server.stop()  # idempotent
