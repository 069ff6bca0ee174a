"""An inference fleet: 4 stand-in engines (tiny-lm) behind the real smg gateway.

A batch of multi-turn rollouts runs through the gateway twice, the way the runner's client
sends them (the whole context each turn: the previous input, the sampled tokens, then an
observation's tokens):

- keyed: every request carries its rollout's routing key (``x-smg-routing-key``) and smg
  routes with ``--policy consistent_hashing``, so a rollout's turns stay on one engine;
- round robin: no key, smg ``--policy round_robin`` spreads each turn over the engines.

Measured both ways: the prefix cache hit ratio over turns 2 and later (the engines'
``meta_info.cached_tokens`` / ``prompt_tokens``) and the engines' CPU per rollout (read from
/proc). The engines' caches are flushed between the two runs, and the runs use different
prompts.

Then a batch abort over the 4 engines: one long request per rollout, spread by its key, then
``swerollout.fleet.abort_all`` on the gateway (the trainer client's batch abort: one
``abort_all`` per engine, through smg's RL fan-out). Measured: the time until no engine has
a request of the batch (their ``/v1/loads``), and the requests still there a second later
(target 0). Baseline, same run: one 1-token ``/generate`` through the gateway.

Last, a weight update across the fleet with every rollout mid-turn (pause ``retract`` on every
engine, a new version, continue): rollouts lost (target 0) and tokens stamped with a version
that did not sample them (target 0).

    python -m bench fleet [--json]      # make bench BENCH=fleet
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from agent_runner.policy.sglang import GenerateResult, SamplingParams, SGLangClient, make_rid
from swerollout import fleet
from swerollout.backoff import Backoff
from swerollout_dev.gateway import GatewayHandle, launch_gateway
from swerollout_dev.policy_server import launch
from swerollout_dev.policy_server.launch import SubprocessServer

ENGINES = 4
ROLLOUTS = 8
TURNS = 4
PROMPT_TOKENS = 700
OBSERVATION_TOKENS = 80
NEW_TOKENS = 12
VOCAB = (1000, 30000)
"""Token ids drawn for prompts and observations (plain text tokens of qwen-2.5)."""


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fleet_cpu(engines: list[SubprocessServer]) -> float:
    return sum(_cpu_seconds(e.pid) for e in engines)


async def _rollout(url: str, index: int, seed: int, keyed: bool) -> tuple[int, int, int]:
    """One multi-turn rollout; returns (cached tokens, prompt tokens, the most a cache could
    hold: the previous request's tokens) over turns 2 and later."""
    rng = random.Random(seed * 1000 + index)
    uid = f"fleet-{seed}-{index:03d}"
    ids = [rng.randrange(*VOCAB) for _ in range(PROMPT_TOKENS)]
    cached = prompt = ceiling = held = 0
    async with SGLangClient(url, routing_key=uid if keyed else None, retry=Backoff(attempts=2)) as client:
        for turn in range(TURNS):
            result = await client.generate(
                ids,
                SamplingParams(max_new_tokens=NEW_TOKENS, temperature=1.0, sampling_seed=rng.randrange(2**31)),
                rid_for_attempt=functools.partial(make_rid, uid, turn),
            )
            if turn:
                cached += result.cached_tokens
                prompt += result.prompt_tokens
                ceiling += held
            held = len(ids) + len(result.output_ids)
            ids = ids + result.output_ids + [rng.randrange(*VOCAB) for _ in range(OBSERVATION_TOKENS)]
    return cached, prompt, ceiling


async def _batch(url: str, engines: list[SubprocessServer], seed: int, keyed: bool) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=30) as http:
        for engine in engines:
            (await http.post(f"{engine.url}/flush_cache")).raise_for_status()
    before = _fleet_cpu(engines)
    counts = await asyncio.gather(*(_rollout(url, i, seed, keyed) for i in range(ROLLOUTS)))
    cpu = _fleet_cpu(engines) - before
    cached, prompt, ceiling = (sum(c[i] for c in counts) for i in range(3))
    return {
        "cache_hit_ratio": cached / prompt if prompt else 0.0,
        "cache_hit_ceiling": ceiling / prompt if prompt else 0.0,
        "cpu_per_rollout_s": cpu / ROLLOUTS,
    }


async def _loads(http: httpx.AsyncClient, engines: list[SubprocessServer]) -> list[int]:
    answers = await asyncio.gather(*(http.get(f"{e.url}/v1/loads") for e in engines))
    return [int(a.json()["loads"][0]["num_total_reqs"]) for a in answers]


async def _abort(gateway: GatewayHandle, engines: list[SubprocessServer]) -> dict[str, Any]:
    clients = [
        SGLangClient(gateway.url, routing_key=f"abort-{i:03d}", retry=Backoff(attempts=1)) for i in range(ROLLOUTS)
    ]
    async with httpx.AsyncClient(timeout=30) as http:
        trips = []
        for _ in range(4):
            started = time.perf_counter()
            await http.post(
                f"{gateway.url}/generate", json={"input_ids": [11, 12, 13], "sampling_params": {"max_new_tokens": 1}}
            )
            trips.append(time.perf_counter() - started)
        baseline = statistics.median(trips[1:])
        turns: list[asyncio.Task[GenerateResult]] = [
            asyncio.create_task(
                c.generate(
                    [1000 + i] * 64,
                    SamplingParams(max_new_tokens=20000, temperature=1.0, ignore_eos=True),
                    rid_for_attempt=functools.partial(make_rid, f"abort-{i:03d}", 0),
                )
            )
            for i, c in enumerate(clients)
        ]
        spread: list[int] = []
        for _ in range(3000):
            spread = await _loads(http, engines)
            if sum(spread) == ROLLOUTS:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # every request past its prefill, decoding
        started = time.perf_counter()
        answers = await fleet.abort_all(http, gateway.url, timeout=5.0)
        drained = None
        while time.perf_counter() - started < 30:
            if sum(await _loads(http, engines)) == 0:
                drained = time.perf_counter() - started
                break
            await asyncio.sleep(0.005)
        results = await asyncio.wait_for(asyncio.gather(*turns), 30)
        await asyncio.sleep(1.0)
        left = sum(await _loads(http, engines))
        aborted = [int((await http.get(f"{e.url}/get_server_info")).json()["aborted_requests"]) for e in engines]
    for client in clients:
        await client.aclose()
    return {
        "requests_per_engine": spread,
        "engines_answered": sum(1 for a in answers if a.ok),
        "abort_drained_s": drained if drained is not None else float("inf"),
        "requests_running_after_abort": left,
        "aborted_results": sum(1 for r in results if r.finish == "abort"),
        "engine_aborted_requests": aborted,
        "round_trip_s": baseline,
    }


async def _weight_update(gateway: GatewayHandle, engines: list[SubprocessServer]) -> dict[str, Any]:
    """Every rollout mid-turn while the trainer pauses every engine (retract), sets a new
    version and continues: how many turns were lost, how many tokens carry a version other
    than the one that sampled them (sampled before the update: v1, after: v2)."""
    tokens = 60
    async with httpx.AsyncClient(timeout=30) as http:
        found = await fleet.discover(http, gateway.url)
        for engine in engines:
            await http.post(f"{engine.url}/_standin/faults", json={"delay_per_token": 0.02})
        await fleet.call_engines(
            http,
            found,
            "POST",
            "/update_weight_version",
            {"new_version": "v1", "abort_all_requests": False},
            timeout=10,
        )
        clients = [SGLangClient(gateway.url, routing_key=f"update-{i:03d}") for i in range(ROLLOUTS)]
        turns = [
            asyncio.create_task(
                c.generate(
                    [2000 + i] * 64,
                    SamplingParams(max_new_tokens=tokens, temperature=1.0, ignore_eos=True),
                    rid_for_attempt=functools.partial(make_rid, f"update-{i:03d}", 0),
                )
            )
            for i, c in enumerate(clients)
        ]
        while sum(await _loads(http, engines)) < ROLLOUTS:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        for route, body in (
            ("/pause_generation", {"mode": "retract"}),
            ("/update_weight_version", {"new_version": "v2", "abort_all_requests": False}),
            ("/continue_generation", {}),
        ):
            await fleet.call_engines(http, found, "POST", route, body, timeout=10)
        results = await asyncio.gather(*turns, return_exceptions=True)
        for engine in engines:
            await http.post(f"{engine.url}/_standin/faults", json={"delay_per_token": 0.0})
    for client in clients:
        await client.aclose()
    whole = [
        r for r in results if isinstance(r, GenerateResult) and r.finish == "length" and len(r.output_ids) == tokens
    ]
    # Every rollout was decoding when the update came, so its turn holds tokens of both: v1
    # then v2. A turn with one version only, or a v1 after a v2, is stamped wrong (counted whole).
    misstamped = 0
    for r in whole:
        first = r.token_versions.index("v2") if "v2" in r.token_versions else tokens
        if not 0 < first < tokens or r.token_versions != ["v1"] * first + ["v2"] * (tokens - first):
            misstamped += tokens
    return {
        "weight_update_lost_rollouts": ROLLOUTS - len(whole),
        "weight_update_mixed_turns": sum(1 for r in whole if "v1" in r.token_versions and "v2" in r.token_versions),
        "weight_update_misstamped_tokens": misstamped,
    }


def _start_engines(count: int) -> list[SubprocessServer]:
    with ThreadPoolExecutor(count) as pool:
        started = list(pool.map(lambda i: launch("tiny-lm", subprocess=True, seed=0), range(count)))
    return [e for e in started if isinstance(e, SubprocessServer)]


def run() -> dict[str, Any]:
    engines = _start_engines(ENGINES)
    gateways: list[GatewayHandle] = []
    try:
        urls = [e.url for e in engines]
        keyed = launch_gateway(urls, policy="consistent_hashing")
        gateways.append(keyed)
        round_robin = launch_gateway(urls, policy="round_robin")
        gateways.append(round_robin)

        async def measure() -> dict[str, Any]:
            with_keys = await _batch(keyed.url, engines, seed=1, keyed=True)
            without = await _batch(round_robin.url, engines, seed=2, keyed=False)
            abort = await _abort(keyed, engines)
            update = await _weight_update(keyed, engines)
            return {
                "engines": ENGINES,
                "rollouts": ROLLOUTS,
                "turns": TURNS,
                "cache_hit_ratio_keyed": with_keys["cache_hit_ratio"],
                "cache_hit_ratio_round_robin": without["cache_hit_ratio"],
                "cache_hit_ceiling": with_keys["cache_hit_ceiling"],
                "cpu_per_rollout_keyed_s": with_keys["cpu_per_rollout_s"],
                "cpu_per_rollout_round_robin_s": without["cpu_per_rollout_s"],
                **abort,
                **update,
            }

        return asyncio.run(measure())
    finally:
        for gateway in gateways:
            gateway.stop()
        for engine in engines:
            engine.stop()


def report(r: dict[str, Any]) -> str:
    cpu_ratio = r["cpu_per_rollout_keyed_s"] / r["cpu_per_rollout_round_robin_s"]
    return "\n".join(
        [
            f"{r['rollouts']} rollouts x {r['turns']} turns over {r['engines']} tiny-lm engines behind smg:",
            f"  prefix cache hit ratio, turns 2+: keyed {r['cache_hit_ratio_keyed']:.3f} "
            f"(target >= 0.9), round robin {r['cache_hit_ratio_round_robin']:.3f}; a cache holding every earlier "
            f"token: {r['cache_hit_ceiling']:.3f} (each turn's new observation is never cached)",
            f"  generation CPU per rollout: keyed {r['cpu_per_rollout_keyed_s']:.2f} s, "
            f"round robin {r['cpu_per_rollout_round_robin_s']:.2f} s ({cpu_ratio:.2f}x)",
            f"  batch abort of {r['rollouts']} requests spread {r['requests_per_engine']} over the engines: "
            f"{r['engines_answered']} engines answered, none running after {r['abort_drained_s']:.3f} s "
            f"(target < 1 s; {r['abort_drained_s'] / r['round_trip_s']:.1f}x a 1-token round trip of "
            f"{r['round_trip_s'] * 1000:.0f} ms); {r['aborted_results']} of {r['rollouts']} answered abort; "
            f"engines counted {r['engine_aborted_requests']} aborts",
            f"  requests still running 1 s after the abort: {r['requests_running_after_abort']} (must be 0)",
            f"  a weight update over the {r['engines']} engines (pause retract, new version, continue) with every "
            f"rollout mid-turn: {r['weight_update_lost_rollouts']} rollouts lost (target 0), "
            f"{r['weight_update_mixed_turns']} turns sampled by both versions, "
            f"{r['weight_update_misstamped_tokens']} tokens stamped with a version that did not sample them (target 0)",
        ]
    )


if __name__ == "__main__":
    print(report(run()))
