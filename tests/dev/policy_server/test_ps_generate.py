"""tiny-lm over /generate: sampling, seeds, stop rules, logprob fields, streaming."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import httpx

from tests.support.ps_support import render

PROMPT = [9707, 11, 1879, 0, 151644, 77091, 198]


async def generate(url: str, **body: Any) -> dict[str, Any]:
    body.setdefault("input_ids", PROMPT)
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(url + "/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_response_shape_and_length_finish(policy_server) -> None:
    server = policy_server("tiny-lm")
    out = await generate(
        server.url, rid="shape-1", sampling_params={"max_new_tokens": 6, "sampling_seed": 3}, return_logprob=True
    )
    meta = out["meta_info"]
    assert meta["id"] == "shape-1"
    assert meta["prompt_tokens"] == len(PROMPT) and meta["completion_tokens"] == 6 == len(out["output_ids"])
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert meta["weight_version"] == "default"
    logprobs = meta["output_token_logprobs"]
    assert [entry[1] for entry in logprobs] == out["output_ids"]
    assert all(entry[0] < 0 and entry[2] is None for entry in logprobs)


async def test_seed_makes_sampling_reproducible(policy_server) -> None:
    server = policy_server("tiny-lm")
    params = {"max_new_tokens": 12, "temperature": 1.0, "sampling_seed": 7}
    first = await generate(server.url, sampling_params=params, return_logprob=True)
    again = await generate(server.url, sampling_params=params, return_logprob=True)
    other = await generate(server.url, sampling_params={**params, "sampling_seed": 8})
    assert first["output_ids"] == again["output_ids"]
    assert first["meta_info"]["output_token_logprobs"] == again["meta_info"]["output_token_logprobs"]
    assert other["output_ids"] != first["output_ids"]


async def test_greedy_and_top_k_one_agree(policy_server) -> None:
    server = policy_server("tiny-lm")
    greedy = await generate(server.url, sampling_params={"max_new_tokens": 8, "temperature": 0}, return_logprob=True)
    top1 = await generate(server.url, sampling_params={"max_new_tokens": 8, "top_k": 1, "sampling_seed": 99})
    tiny_p = await generate(server.url, sampling_params={"max_new_tokens": 8, "top_p": 1e-6, "sampling_seed": 5})
    assert greedy["output_ids"] == top1["output_ids"] == tiny_p["output_ids"]


async def test_stop_token_ids_end_generation_at_that_token(policy_server) -> None:
    server = policy_server("tiny-lm")
    greedy = {"max_new_tokens": 8, "temperature": 0}
    base = await generate(server.url, sampling_params=greedy)
    third = base["output_ids"][2]
    stopped = await generate(server.url, sampling_params={**greedy, "stop_token_ids": [third]})
    assert stopped["output_ids"] == base["output_ids"][: base["output_ids"].index(third) + 1]
    assert stopped["meta_info"]["finish_reason"] == {"type": "stop", "matched": third}


async def test_stop_string_cuts_text_not_tokens(policy_server, tokenizer) -> None:
    server = policy_server("tiny-lm")
    greedy = {"max_new_tokens": 8, "temperature": 0}
    base = await generate(server.url, sampling_params=greedy)
    fourth_text = tokenizer.decode(base["output_ids"][3:4])
    stopped = await generate(server.url, sampling_params={**greedy, "stop": [fourth_text]})
    finish = stopped["meta_info"]["finish_reason"]
    assert finish == {"type": "stop", "matched": fourth_text}
    assert fourth_text not in stopped["text"]
    assert stopped["output_ids"] == base["output_ids"][: len(stopped["output_ids"])]
    assert tokenizer.decode(stopped["output_ids"]).startswith(stopped["text"])


async def test_text_prompt_and_text_in_logprobs(policy_server, tokenizer) -> None:
    server = policy_server("tiny-lm")
    params = {"max_new_tokens": 4, "temperature": 0}
    by_text = await generate(
        server.url,
        input_ids=None,
        text="Hello world",
        sampling_params=params,
        return_logprob=True,
        return_text_in_logprobs=True,
    )
    by_ids = await generate(server.url, input_ids=tokenizer.encode("Hello world"), sampling_params=params)
    assert by_text["output_ids"] == by_ids["output_ids"]
    texts = [entry[2] for entry in by_text["meta_info"]["output_token_logprobs"]]
    assert texts == [tokenizer.decode([t], skip_special_tokens=False) for t in by_text["output_ids"]]


async def test_routed_experts_are_int32_per_token_read(policy_server) -> None:
    server = policy_server("tiny-lm")
    out = await generate(
        server.url, sampling_params={"max_new_tokens": 5, "sampling_seed": 2}, return_routed_experts=True
    )
    raw = base64.b64decode(out["meta_info"]["routed_experts"])
    values = struct.unpack(f"<{len(raw) // 4}i", raw)
    # SGLang's shape: [seqlen - 1 - routed_experts_start_len, layers, top_k] over prompt + output.
    seqlen = len(PROMPT) + 5
    assert len(values) == (seqlen - 1) * 2 * 2 and all(0 <= v < 8 for v in values)
    tail = await generate(
        server.url,
        sampling_params={"max_new_tokens": 5, "sampling_seed": 2},
        return_routed_experts=True,
        routed_experts_start_len=seqlen - 3,
    )
    tail_raw = base64.b64decode(tail["meta_info"]["routed_experts"])
    assert tail["output_ids"] == out["output_ids"] and tail_raw == raw[-2 * 2 * 2 * 4 :]  # only the last 2 rows
    plain = await generate(server.url, sampling_params=None)  # null means SGLang's defaults
    assert "routed_experts" not in plain["meta_info"] and plain["meta_info"]["completion_tokens"] == 128


async def test_streaming_sends_cumulative_chunks_then_done(policy_server) -> None:
    server = policy_server("tiny-lm")
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 5, "sampling_seed": 1},
        "stream": True,
        "return_logprob": True,
    }
    chunks: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=60) as client:
        async with client.stream("POST", server.url + "/generate", json=body) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [line async for line in response.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert [len(c["output_ids"]) for c in chunks] == [1, 2, 3, 4, 5, 5]
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    final = chunks[-1]
    assert final["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    unstreamed = await generate(server.url, sampling_params={"max_new_tokens": 5, "sampling_seed": 1})
    assert final["output_ids"] == unstreamed["output_ids"]


async def test_tiny_lm_chat_completion(policy_server, tokenizer) -> None:
    server = policy_server("tiny-lm")
    messages = [{"role": "user", "content": "hi"}]
    async with httpx.AsyncClient(timeout=60) as client:
        reply = (
            await client.post(
                server.url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 7, "seed": 3}
            )
        ).json()
    assert reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["completion_tokens"] == 7
    assert reply["usage"]["prompt_tokens"] == len(render(tokenizer, messages))
