"""RLTokenModel's own per-turn overhead, excluding generation, at 4k/16k/32k context.

Generation is replaced by a canned answer (a fixed tool-call reply of ~120 tokens),
so what is timed is the runner's bookkeeping per turn: rendering the environment
delta, appending tokens, decoding and parsing the reply, and building the /generate
request body. Two baselines are measured in the same run on the same tokens:

- ``list_append``: appending the turn's tokens to a plain list (the floor);
- ``naive_retokenize``: re-rendering the whole conversation with the chat template
  and tokenizing it from scratch every turn (the approach that causes token drift).

Also measured: snapshot encode + decode time and bytes per token at 32k tokens.

Run: ``python -m bench.runner_overhead`` (prints a report); ``run()`` returns the numbers.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from typing import Any

from agent_runner.policy.rl_model import RLTokenModel, Snapshot
from agent_runner.policy.sglang import GenerateRequest, GenerateResult, SamplingParams, encode_request
from swerollout.tokenizers import load_tokenizer

TOKENIZER = "qwen-2.5"
SIZES = (4_000, 16_000, 32_000)
MEASURED_TURNS = 9
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
_WORDS = "value result config parser token buffer request retry abort index module branch commit".split()


def observation(step: int) -> str:
    """A tool result of ~300 tokens that differs every step (so compression is realistic)."""
    rng = random.Random(step)
    return "\n".join(
        f"src/{rng.choice(_WORDS)}_{rng.randrange(1000)}.py:{rng.randrange(9999)}: "
        f"def {rng.choice(_WORDS)}_{rng.choice(_WORDS)}(x): return x * {rng.random():.6f}"
        for _ in range(12)
    )


class CannedClient:
    """Stands in for SGLangClient: builds the real request body, answers a fixed reply."""

    def __init__(self, reply_ids: list[int]) -> None:
        self.reply_ids = reply_ids
        self.body_bytes = 0

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        rid_for_attempt: Any,
        input_ids_json: str | None = None,
        **_: Any,
    ) -> GenerateResult:
        rid = rid_for_attempt(1)
        request = GenerateRequest(
            rid=rid, input_ids=[] if input_ids_json is not None else input_ids, sampling_params=sampling
        )
        self.body_bytes = len(encode_request(request, input_ids_json))
        ids = self.reply_ids
        return GenerateResult(
            rid=rid,
            output_ids=list(ids),
            logprobs=[-0.5] * len(ids),
            text="",
            finish="stop",
            weight_version="v1",
            prompt_tokens=len(input_ids),
        )

    async def aclose(self) -> None:
        pass


def _reply_ids(tokenizer: Any) -> list[int]:
    call = {"name": "bash", "arguments": {"command": "grep -rn 'def function_3' src/ && sed -n 1,40p src/module_3.py"}}
    text = (
        "I will look at the module that defines function_3 first.\n<tool_call>\n" + json.dumps(call) + "\n</tool_call>"
    )
    return [*tokenizer.encode(text, add_special_tokens=False), tokenizer.convert_tokens_to_ids("<|im_end|>")]


async def _measure(size: int) -> dict[str, float]:
    tokenizer = load_tokenizer(TOKENIZER)
    reply = _reply_ids(tokenizer)
    client = CannedClient(reply)
    model = RLTokenModel(
        tokenizer,
        client,  # type: ignore[arg-type]
        sampling=SamplingParams(max_new_tokens=1024),
        max_context_tokens=1_000_000,
        run_uid="bench",
        tools=TOOLS,
    )
    model.add_messages(
        [{"role": "system", "content": "You are a careful engineer."}, {"role": "user", "content": "Fix the bug."}]
    )
    step = 0

    async def turn() -> None:
        nonlocal step
        await model.generate()
        step += 1
        model.add_messages([{"role": "tool", "tool_call_id": f"call_{step}_0", "content": observation(step)}])

    while len(model.buffer) < size:
        await turn()
    context_at_start = len(model.buffer)
    ours: list[float] = []
    for _ in range(MEASURED_TURNS):
        start = time.perf_counter()
        await turn()
        ours.append(time.perf_counter() - start)
    # The very last turn's tokens (reply + delta) for the list-append floor.
    new_tokens = list(model.buffer.input_ids[-(len(reply) + 60) :])
    appends: list[float] = []
    for _ in range(MEASURED_TURNS):
        plain = list(model.buffer.input_ids)
        start = time.perf_counter()
        plain.extend(new_tokens)
        appends.append(time.perf_counter() - start)
    naive: list[float] = []
    for _ in range(3):
        start = time.perf_counter()
        text = model.template.render(model.messages, add_generation_prompt=True)
        ids = tokenizer.encode(text, add_special_tokens=False)
        json.dumps({"input_ids": ids})
        naive.append(time.perf_counter() - start)
    return {
        "context_tokens": float(context_at_start),
        "ours_ms": statistics.median(ours) * 1e3,
        "list_append_ms": statistics.median(appends) * 1e3,
        "naive_retokenize_ms": statistics.median(naive) * 1e3,
        "request_body_bytes": float(client.body_bytes),
    }


def _snapshot_numbers() -> dict[str, float]:
    tokenizer = load_tokenizer(TOKENIZER)
    model = RLTokenModel(
        tokenizer,
        CannedClient(_reply_ids(tokenizer)),  # type: ignore[arg-type]
        sampling=SamplingParams(),
        max_context_tokens=1_000_000,
        run_uid="bench",
        tools=TOOLS,
    )
    model.add_messages([{"role": "user", "content": "Fix the bug."}])

    async def fill() -> None:
        step = 0
        while len(model.buffer) < 32_000:
            await model.generate()
            step += 1
            model.add_messages([{"role": "tool", "tool_call_id": f"c{step}", "content": observation(step)}])

    asyncio.run(fill())
    encode_s, decode_s = [], []
    blob = b""
    for _ in range(5):
        start = time.perf_counter()
        blob = model.snapshot({"turns": 1})
        encode_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        Snapshot.from_bytes(blob)
        decode_s.append(time.perf_counter() - start)
    tokens = len(model.buffer)
    return {
        "tokens": float(tokens),
        "encode_ms": statistics.median(encode_s) * 1e3,
        "decode_ms": statistics.median(decode_s) * 1e3,
        "bytes": float(len(blob)),
        "bytes_per_token": len(blob) / tokens,
        "raw_packed_bytes_per_token": 4 + 1 + 4 + 2,
    }


def run() -> dict[str, Any]:
    turns = {str(size): asyncio.run(_measure(size)) for size in SIZES}
    for numbers in turns.values():
        numbers["ours_vs_list_append"] = numbers["ours_ms"] / max(numbers["list_append_ms"], 1e-9)
        numbers["naive_vs_ours"] = numbers["naive_retokenize_ms"] / max(numbers["ours_ms"], 1e-9)
    return {"tokenizer": TOKENIZER, "per_turn": turns, "snapshot_32k": _snapshot_numbers()}


def main() -> None:
    result = run()
    print(
        f"RLTokenModel per-turn overhead (tokenizer {result['tokenizer']}, generation excluded, median of {MEASURED_TURNS})"
    )
    print(
        f"{'context':>9} {'ours ms':>9} {'append ms':>10} {'ours/append':>12} {'naive ms':>9} {'naive/ours':>11} {'body KiB':>9}"
    )
    for numbers in result["per_turn"].values():
        print(
            f"{numbers['context_tokens']:>9.0f} {numbers['ours_ms']:>9.3f} {numbers['list_append_ms']:>10.4f} "
            f"{numbers['ours_vs_list_append']:>12.0f} {numbers['naive_retokenize_ms']:>9.2f} "
            f"{numbers['naive_vs_ours']:>11.1f} {numbers['request_body_bytes'] / 1024:>9.1f}"
        )
    snap = result["snapshot_32k"]
    print(
        f"snapshot at {snap['tokens']:.0f} tokens: encode {snap['encode_ms']:.2f} ms, decode {snap['decode_ms']:.2f} ms, "
        f"{snap['bytes'] / 1024:.1f} KiB = {snap['bytes_per_token']:.2f} bytes/token "
        f"(raw packed arrays: {snap['raw_packed_bytes_per_token']} bytes/token)"
    )


if __name__ == "__main__":
    main()
