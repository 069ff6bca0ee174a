"""The stand-in answers as SGLang 0.5.23 does, judged by the sglang wheel's own code.

Responses are decoded with the wheel's generated contract (sglang/api/v1/api_types.py:
the finish reasons must decode to their typed structs, not the untyped fallback);
weight-version spans are compared with the wheel's span helpers
(sglang/srt/utils/weight_versions.py); control-route defaults are compared with the
dataclasses of sglang/srt/managers/io_struct.py, read from the wheel's source because
that module imports torch and zmq.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest

from swerollout.wire import sglang as wire
from tests.support.sglang_wheel import dataclass_fields, load

api_types = load("sglang.api.v1.api_types")
weight_versions = load("sglang.srt.utils.weight_versions")
PROMPT = [9707, 11, 1879, 0]


def decode(body: dict[str, Any]) -> Any:
    response = api_types.decode_GenerateResponse(body)
    meta = response.meta_info
    assert meta is not None and response.output_ids == body["output_ids"]
    for entry in body["meta_info"].get("output_token_logprobs") or []:
        api_types.decode_LogprobEntry(entry)  # a 3-element [logprob, id, text]
    return meta


async def test_generate_responses_decode_as_sglangs(policy_server) -> None:
    server = policy_server("tiny-lm", faults={"abort_after_tokens": 6})
    base = {"input_ids": PROMPT, "return_logprob": True}
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        aborted = (await client.post("/generate", json={**base, "sampling_params": {"max_new_tokens": 20}})).json()
        await client.post("/_standin/faults", json={"clear_abort_after_tokens": True})
        length = (
            await client.post(
                "/generate",
                json={
                    **base,
                    "sampling_params": {"max_new_tokens": 3, "sampling_seed": 0},
                },
            )
        ).json()
        stop = (
            await client.post(
                "/generate",
                json={
                    **base,
                    "sampling_params": {
                        "max_new_tokens": 20,
                        "stop_token_ids": length["output_ids"][:1],
                        "sampling_seed": 0,
                    },
                },
            )
        ).json()
        routed = (
            await client.post(
                "/generate",
                json={
                    **base,
                    "sampling_params": {"max_new_tokens": 3},
                    "return_routed_experts": True,
                    "routed_experts_start_len": 2,
                },
            )
        ).json()
    assert isinstance(decode(aborted).finish_reason, api_types.FinishAbort)
    assert isinstance(decode(length).finish_reason, api_types.FinishLength)
    assert decode(length).finish_reason.length == 3
    assert isinstance(decode(stop).finish_reason, api_types.FinishStop)
    meta = decode(routed)
    assert meta.weight_version == "default"  # what SGLang reports before a trainer sets one
    rows = len(base64.b64decode(routed["meta_info"]["routed_experts"])) // 4 // (2 * 2)
    assert rows == len(PROMPT) + 3 - 1 - 2  # [seqlen - 1 - routed_experts_start_len, layers, top_k]


async def test_spans_equal_the_wheels_span_helpers(policy_server) -> None:
    server = policy_server("tiny-lm", faults={"delay_per_token": 0.02}, weight_version="v0")
    body = {
        "rid": "span-1",
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 40, "ignore_eos": True},
        "stream": True,
    }
    lengths: list[int] = []
    final: dict[str, Any] = {}

    async def stream(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", "/generate", json=body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {"):
                    final.update(json.loads(line[len("data: ") :]))
                    lengths.append(len(final["output_ids"]))

    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        task = asyncio.create_task(stream(client))
        changes: list[tuple[str, int]] = []
        for old, new in (("v0", "v1"), ("v1", "v2")):
            for _ in range(2000):  # wait for more output (a condition, not a sleep)
                if lengths and lengths[-1] >= 3 * (len(changes) + 1):
                    break
                await asyncio.sleep(0.01)
            await client.post("/pause_generation", json={"mode": "in_place"})
            used = (await client.get("/v1/loads")).json()["loads"][0]["num_used_tokens"]
            changes.append((old, used - len(PROMPT)))  # frozen: no token comes until continue
            await client.post("/update_weight_version", json={"new_version": new, "abort_all_requests": False})
            await client.post("/continue_generation", json={})
        await task
    meta = decode(final)
    events = [weight_versions.WeightVersionEvent(old_version=v, num_output_tokens=n) for v, n in changes]
    spans = weight_versions.compute_weight_version_spans(events, "v2", 40)
    expected: dict[str, Any] = {}
    weight_versions.add_weight_versions_to_meta_info(expected, spans, 40)
    assert final["meta_info"]["weight_versions"] == expected["weight_versions"]
    assert final["meta_info"]["weight_version"] == expected["weight_version"] == meta.weight_version


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (wire.AbortRequest, "AbortReq"),
        (wire.PauseRequest, "PauseGenerationReqInput"),
        (wire.ContinueRequest, "ContinueGenerationReqInput"),
        (wire.UpdateWeightVersionRequest, "UpdateWeightVersionReqInput"),
        (wire.UpdateWeightsFromDiskRequest, "UpdateWeightFromDiskReqInput"),
    ],
)
def test_control_bodies_have_sglangs_fields_and_defaults(ours: type[Any], theirs: str) -> None:
    fields = dataclass_fields("srt/managers/io_struct.py", theirs)
    for name, info in ours.model_fields.items():
        assert name in fields or name == "rid", f"{theirs} has no field {name}"
        if name in fields and fields[name] is not ...:
            assert info.default == fields[name], f"{theirs}.{name} defaults to {fields[name]!r}"
        elif name in fields:
            assert info.is_required(), f"{theirs}.{name} is required"


async def test_server_info_decodes_and_states_the_limits(policy_server) -> None:
    server = policy_server("null", context_length=4096)
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
        info = (await client.get("/get_server_info")).json()
        model = (await client.get("/get_model_info")).json()
    api_types.decode_GetServerInfoResponse(info)
    api_types.decode_GetModelInfoResponse(model)
    limits = wire.ContextLimits.from_info(wire.ServerInfo.model_validate(info))
    assert limits == wire.ContextLimits(context_length=4096, max_req_len=4095)
