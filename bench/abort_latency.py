"""Abort -> runner Aborted, against the stand-in with SGLang 0.5.23's exact-rid aborts.

A batch of runners each has a /generate in flight on the stand-in (tiny-lm, slowed
to one token per 20 ms so the requests are mid-generation). All are aborted at once
the way the runner does it (AbortableModel.request_abort -> SGLangClient.
abort_in_flight: each exact rid). Measured: from the abort to each runner's turn
returning ABORT. Baseline, same run: one 1-token /generate round trip. Target: under
one second for every runner.

Second figure: the same batch, its requests sent while the server is paused (held at
SGLang's pause gate, where an exact-rid abort is lost): the runner sees /ready 503 and
closes them instead, so they end as aborted without waiting for /continue_generation.

    python -m bench.abort_latency
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import httpx

from agent_runner.pod.session import AbortableModel
from agent_runner.policy.model import FinishReason
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import SamplingParams, SGLangClient
from swerollout.backoff import Backoff
from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server import launch

BATCH = 8
PROMPT = [{"role": "system", "content": "You are a coder."}, {"role": "user", "content": "Fix the bug."}]


async def _measure(url: str, batch: int) -> dict[str, Any]:
    tokenizer = load_tokenizer("qwen-2.5")
    runners: list[tuple[AbortableModel, SGLangClient]] = []
    for i in range(batch):
        client = SGLangClient(url, retry=Backoff(attempts=2))
        model = RLTokenModel(
            tokenizer,
            client,
            sampling=SamplingParams(max_new_tokens=3000, temperature=1.0),
            max_context_tokens=4000,
            run_uid=f"bench-{i:04d}",
        )
        model.add_messages(PROMPT)
        runners.append((AbortableModel(model, client.abort_in_flight), client))
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        trips: list[float] = []
        for _ in range(4):  # the first one warms the policy up; the median of the rest
            started = time.perf_counter()
            await http.post("/generate", json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}})
            trips.append(time.perf_counter() - started)
        baseline = statistics.median(trips[1:])
        turns = [asyncio.create_task(r.generate()) for r, _ in runners]
        for _ in range(6000):  # every request running and producing tokens
            load = (await http.get("/v1/loads")).json()["loads"][0]
            if load["num_running_reqs"] == batch:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        ended: list[float] = []
        t0 = time.perf_counter()

        async def abort(model: AbortableModel, turn: asyncio.Task[Any]) -> None:
            await model.request_abort()
            result = await turn
            ended.append(time.perf_counter() - t0)
            assert result.finish_reason == FinishReason.ABORT, result

        await asyncio.gather(*(abort(r, t) for (r, _), t in zip(runners, turns)))
    for _, client in runners:
        await client.aclose()
    return {
        "batch": batch,
        "abort_to_aborted_max_s": max(ended),
        "abort_to_aborted_p50_s": statistics.median(ended),
        "baseline_generate_1_token_s": baseline,
        "ratio_max_vs_baseline": max(ended) / baseline,
    }


async def _measure_paused(url: str, batch: int) -> dict[str, Any]:
    tokenizer = load_tokenizer("qwen-2.5")
    runners: list[tuple[AbortableModel, SGLangClient]] = []
    for i in range(batch):
        client = SGLangClient(url, retry=Backoff(attempts=2))
        model = RLTokenModel(
            tokenizer,
            client,
            sampling=SamplingParams(max_new_tokens=3000, temperature=1.0),
            max_context_tokens=4000,
            run_uid=f"bench-paused-{i:04d}",
        )
        model.add_messages(PROMPT)
        runners.append((AbortableModel(model, client.abort_in_flight), client))
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        (await http.post("/pause_generation", json={"mode": "in_place"})).raise_for_status()
        turns = [asyncio.create_task(r.generate()) for r, _ in runners]
        for _ in range(6000):  # every request held at the pause gate
            if (await http.get("/v1/loads")).json()["loads"][0]["num_waiting_reqs"] == batch:
                break
            await asyncio.sleep(0.01)
        ended: list[float] = []
        t0 = time.perf_counter()

        async def abort(model: AbortableModel, turn: asyncio.Task[Any]) -> None:
            await model.request_abort()
            result = await turn
            ended.append(time.perf_counter() - t0)
            assert result.finish_reason == FinishReason.ABORT, result

        await asyncio.gather(*(abort(r, t) for (r, _), t in zip(runners, turns)))
        (await http.post("/continue_generation", json={})).raise_for_status()
    for _, client in runners:
        await client.aclose()
    return {"paused_abort_to_aborted_max_s": max(ended), "paused_abort_to_aborted_p50_s": statistics.median(ended)}


def run(batch: int = BATCH) -> dict[str, Any]:
    with launch(
        "tiny-lm", subprocess=True, tokenizer="qwen-2.5", context_length=4096, faults={"delay_per_token": 0.02}
    ) as server:
        result = asyncio.run(_measure(server.url, batch))
        result.update(asyncio.run(_measure_paused(server.url, batch)))
        result["ratio_paused_max_vs_baseline"] = (
            result["paused_abort_to_aborted_max_s"] / result["baseline_generate_1_token_s"]
        )
        return result


def report(result: dict[str, Any]) -> str:
    verdict = "under 1 s" if result["abort_to_aborted_max_s"] < 1.0 else "OVER 1 s"
    return (
        f"abort -> runner Aborted, {result['batch']} runners mid-generation on the stand-in (exact-rid aborts): "
        f"max {result['abort_to_aborted_max_s'] * 1000:.0f} ms, p50 {result['abort_to_aborted_p50_s'] * 1000:.0f} ms "
        f"({verdict}); 1-token /generate baseline {result['baseline_generate_1_token_s'] * 1000:.0f} ms, "
        f"ratio {result['ratio_max_vs_baseline']:.1f}\n"
        f"abort -> runner Aborted, {result['batch']} requests held at a paused server's gate (closed, not aborted by rid): "
        f"max {result['paused_abort_to_aborted_max_s'] * 1000:.0f} ms, p50 {result['paused_abort_to_aborted_p50_s'] * 1000:.0f} ms, "
        f"ratio {result['ratio_paused_max_vs_baseline']:.1f} vs the 1-token baseline"
    )


if __name__ == "__main__":
    print(report(run()))
