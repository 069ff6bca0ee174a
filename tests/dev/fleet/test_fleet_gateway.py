"""The real smg gateway in front of three stand-in engines (tiny-lm): routing keys keep a
rollout's turns on one engine (and a rollout whose engine is gone is served by another), a suspension's exact-rid abort and a batch abort reach the
engine holding each request (through smg's RL fan-out, and through its worker list; also
over a trainer adapter's endpoint list of a gateway and an engine), and a fleet-wide weight
update with ``retract`` is ridden out with per-token versions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent_runner.agent.config import AgentConfig
from agent_runner.pod.session import Runner
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import GenerateResult, SamplingParams, SGLangClient, make_rid
from swerollout import fleet
from swerollout.api import v1alpha1 as api
from swerollout.backoff import Backoff
from swerollout.client import AsyncRolloutClient
from swerollout.trainers._settings import AdapterSettings
from swerollout.wire.runner_env import RunnerEnv
from swerollout.wire.smg import ROUTING_KEY_HEADER
from swerollout_dev.controlplane import ControlPlane
from swerollout_dev.gateway import GatewayHandle, launch_gateway
from swerollout_dev.policy_server.launch import PolicyServerHandle, launch
from swerollout_dev.tasks import DEFAULT_TASKS_DIR, load_instances
from tests.support.client_fixtures import crd

__all__ = ["crd"]

ENGINES = 3


@pytest.fixture(scope="module")
def engines() -> Iterator[list[PolicyServerHandle]]:
    started: list[PolicyServerHandle] = []
    try:
        for _ in range(ENGINES):
            started.append(launch("tiny-lm", tokenizer="qwen-2.5"))
        yield started
    finally:
        for engine in started:
            engine.stop()


@pytest.fixture(scope="module")
def rl_gateway(engines: list[PolicyServerHandle]) -> Iterator[GatewayHandle]:
    with launch_gateway([e.url for e in engines], enable_rl=True) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def plain_gateway(engines: list[PolicyServerHandle]) -> Iterator[GatewayHandle]:
    with launch_gateway([e.url for e in engines], enable_rl=False) as gateway:
        yield gateway


@pytest.fixture
def slow(engines: list[PolicyServerHandle]) -> Iterator[None]:
    """Each engine sleeps 20 ms a token, so a request is still decoding when it is aborted."""
    with httpx.Client(timeout=10) as http:
        for engine in engines:
            http.post(f"{engine.url}/_standin/faults", json={"delay_per_token": 0.02}).raise_for_status()
        yield
        for engine in engines:
            http.post(f"{engine.url}/_standin/faults", json={"delay_per_token": 0.0}).raise_for_status()
            http.post(f"{engine.url}/continue_generation", json={}).raise_for_status()


def _holders(engines: list[PolicyServerHandle], http: httpx.Client) -> dict[str, str]:
    """rid -> the URL of the engine that admitted it."""
    held: dict[str, str] = {}
    for engine in engines:
        for record in http.get(f"{engine.url}/_standin/requests").json()["requests"]:
            held[record["rid"]] = engine.url
    return held


async def _aborted_counts(engines: list[PolicyServerHandle]) -> dict[str, int]:
    async with httpx.AsyncClient(timeout=10) as http:
        return {e.url: int((await http.get(f"{e.url}/get_server_info")).json()["aborted_requests"]) for e in engines}


async def _running(engines: list[PolicyServerHandle]) -> int:
    async with httpx.AsyncClient(timeout=10) as http:
        loads = [(await http.get(f"{e.url}/v1/loads")).json()["loads"][0] for e in engines]
    return sum(int(load["num_total_reqs"]) for load in loads)


async def _until_running(engines: list[PolicyServerHandle], count: int) -> None:
    for _ in range(1000):
        if await _running(engines) == count:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{count} requests never ran at once (now {await _running(engines)})")


async def _until_sampled(engines: list[PolicyServerHandle], tokens: int) -> None:
    """Until every engine's requests have sampled about ``tokens`` each (a 32-token prompt
    each; the stand-in steps its requests in turn, so they advance together)."""
    async with httpx.AsyncClient(timeout=10) as http:
        for _ in range(1000):
            loads = [(await http.get(f"{e.url}/v1/loads")).json()["loads"][0] for e in engines]
            if all(load["num_used_tokens"] >= load["num_total_reqs"] * (32 + tokens) for load in loads):
                return
            await asyncio.sleep(0.02)
    raise AssertionError("the requests sampled no tokens")


def _long(client: SGLangClient, uid: str, tokens: int = 4000) -> asyncio.Task[GenerateResult]:
    return asyncio.create_task(
        client.generate(
            [500 + len(uid)] * 32,
            SamplingParams(max_new_tokens=tokens, temperature=1.0, ignore_eos=True),
            rid_for_attempt=lambda attempt: make_rid(uid, 0, attempt),
        )
    )


async def test_routing_keys_keep_a_rollouts_turns_on_one_engine(
    engines: list[PolicyServerHandle], rl_gateway: GatewayHandle
) -> None:
    rids: dict[str, list[str]] = {}
    for index in range(6):
        uid = f"route-{index}"
        ids = [1000 + index * 37 + i for i in range(200)]
        previous = 0
        async with SGLangClient(rl_gateway.url, routing_key=uid) as client:
            for turn in range(3):
                result = await client.generate(
                    ids,
                    SamplingParams(max_new_tokens=6, temperature=1.0),
                    rid_for_attempt=lambda attempt, turn=turn, uid=uid: make_rid(uid, turn, attempt),
                )
                rids.setdefault(uid, []).append(result.rid)
                if turn:
                    # The previous turn's whole context was on this engine already.
                    assert result.cached_tokens >= previous, (uid, turn, result.cached_tokens, previous)
                previous = len(ids)
                ids = ids + result.output_ids + [2000 + turn] * 20
    with httpx.Client(timeout=10) as http:
        held = _holders(engines, http)
    for uid, mine in rids.items():
        assert len({held[rid] for rid in mine}) == 1, (uid, [held[rid] for rid in mine])


@pytest.mark.parametrize("kind", ["rl", "plain"])
async def test_a_suspensions_abort_reaches_the_engine_holding_the_request(
    engines: list[PolicyServerHandle],
    rl_gateway: GatewayHandle,
    plain_gateway: GatewayHandle,
    slow: None,
    kind: str,
) -> None:
    gateway = rl_gateway if kind == "rl" else plain_gateway
    before = await _aborted_counts(engines)
    clients = [SGLangClient(gateway.url, routing_key=f"susp-{kind}-{i}", retry=Backoff(attempts=1)) for i in range(3)]
    try:
        turns = [_long(c, f"susp-{kind}-{i}") for i, c in enumerate(clients)]
        await _until_running(engines, 3)
        [rid] = clients[0].in_flight
        assert await clients[0].abort_in_flight() == 1
        result = await asyncio.wait_for(turns[0], 60)
        assert result.finish == "abort" and result.rid == rid
        # The other rollouts' requests were not touched.
        assert await _running(engines) == 2 and not any(t.done() for t in turns[1:])
        with httpx.Client(timeout=10) as http:
            holder = _holders(engines, http)[rid]
        after = await _aborted_counts(engines)
        assert {u: after[u] - before[u] for u in after} == {u: int(u == holder) for u in after}
        for client in clients[1:]:
            assert await client.abort_in_flight() == 1
        assert all(r.finish == "abort" for r in await asyncio.wait_for(asyncio.gather(*turns[1:]), 60))
        assert await _running(engines) == 0
    finally:
        for client in clients:
            await client.aclose()


async def test_a_batch_abort_reaches_every_engine(
    crd: ControlPlane,
    namespace: str,
    engines: list[PolicyServerHandle],
    rl_gateway: GatewayHandle,
    slow: None,
) -> None:
    instances = load_instances(DEFAULT_TASKS_DIR / "instances.jsonl")[:2]
    inference = {"endpoint": rl_gateway.url, "tokenizer": "qwen-2.5"}
    clients = [SGLangClient(rl_gateway.url, routing_key=f"batch-{i}", retry=Backoff(attempts=1)) for i in range(6)]
    try:
        async with AsyncRolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as trainer:
            names = await trainer.submit_batch(instances, 1, batch="fleet", inference=inference)
            turns = [_long(c, f"batch-{i}") for i, c in enumerate(clients)]
            await _until_running(engines, 6)
            with httpx.Client(timeout=10) as http:
                held = _holders(engines, http)
            spread = {held[c.in_flight[0]] for c in clients}
            before = await _aborted_counts(engines)
            assert sorted(await trainer.abort("fleet")) == sorted(names)
            results = await asyncio.wait_for(asyncio.gather(*turns), 60)
        assert all(r.finish == "abort" for r in results)
        assert await _running(engines) == 0
        after = await _aborted_counts(engines)
        # Every engine that held a request of the batch aborted its own, and only those.
        assert sum(after[u] - before[u] for u in after) == 6
        assert {u for u in after if after[u] > before[u]} == spread
    finally:
        for client in clients:
            await client.aclose()


@pytest.mark.parametrize("mode", ["retract", "in_place"])
async def test_a_fleet_wide_weight_update_keeps_per_token_versions(
    engines: list[PolicyServerHandle],
    rl_gateway: GatewayHandle,
    slow: None,
    mode: str,
) -> None:
    clients = [SGLangClient(rl_gateway.url, routing_key=f"update-{i}", retry=Backoff(attempts=1)) for i in range(4)]
    async with httpx.AsyncClient(timeout=30) as http:
        found = await fleet.discover(http, rl_gateway.url)
        assert found.kind is fleet.EndpointKind.RL_GATEWAY and sorted(found.engines) == sorted(e.url for e in engines)
        set_v1 = await fleet.call_engines(
            http,
            found,
            "POST",
            "/update_weight_version",
            {"new_version": f"{mode}-v1", "abort_all_requests": False},
            timeout=10,
        )
        assert [a.ok for a in set_v1] == [True] * ENGINES
        try:
            turns = [_long(c, f"update-{i}", tokens=40) for i, c in enumerate(clients)]
            await _until_running(engines, 4)
            await _until_sampled(engines, 3)  # a few tokens each under v1, however loaded the machine
            for route, body in (
                ("/pause_generation", {"mode": mode}),
                ("/update_weight_version", {"new_version": f"{mode}-v2", "abort_all_requests": False}),
                ("/continue_generation", {}),
            ):
                answers = await fleet.call_engines(http, found, "POST", route, body, timeout=10)
                assert [a.ok for a in answers] == [True] * ENGINES, (route, answers)
            results = await asyncio.wait_for(
                asyncio.gather(*turns), 120
            )  # a loaded 2-core machine steps 4 requests slowly
        finally:
            for client in clients:
                await client.aclose()
    for result in results:
        assert result.finish == "length" and len(result.output_ids) == 40
        versions = result.token_versions
        v1, v2 = f"{mode}-v1", f"{mode}-v2"
        first_v2 = versions.index(v2)
        # v1 for the tokens sampled before the update, v2 for every one after: none lost or relabelled.
        assert 0 < first_v2 < 40 and versions == [v1] * first_v2 + [v2] * (40 - first_v2), versions


async def test_a_batch_abort_covers_every_entry_of_an_endpoint_list(
    crd: ControlPlane,
    namespace: str,
    engines: list[PolicyServerHandle],
    rl_gateway: GatewayHandle,
    slow: None,
) -> None:
    # A trainer adapter's endpoint list: the gateway and an engine outside it.
    with launch("tiny-lm", tokenizer="qwen-2.5", faults={"delay_per_token": 0.02}) as lone:
        settings = AdapterSettings(endpoints=[rl_gateway.url, lone.url], tokenizer="qwen-2.5")
        members = [settings.inference_for(m) for m in range(2)]
        assert [m["endpoint"] for m in members] == [rl_gateway.url, lone.url]
        instances = load_instances(DEFAULT_TASKS_DIR / "instances.jsonl")[:1]
        clients = [SGLangClient(rl_gateway.url, routing_key=f"list-{i}", retry=Backoff(attempts=1)) for i in range(3)]
        clients.append(SGLangClient(lone.url, routing_key="list-3", retry=Backoff(attempts=1)))
        try:
            async with AsyncRolloutClient.connect(crd.kubeconfig_path, namespace=namespace) as trainer:
                await trainer.submit_batch(instances, 2, batch="list", inference=members[0], member_inference=members)
                turns = [_long(c, f"list-{i}") for i, c in enumerate(clients)]
                await _until_running([*engines, lone], 4)
                await trainer.abort("list")
                results = await asyncio.wait_for(asyncio.gather(*turns), 60)
            assert all(r.finish == "abort" for r in results)
            assert await _running([*engines, lone]) == 0
            counts = await _aborted_counts([lone])
            assert counts == {lone.url: 1}
        finally:
            for client in clients:
                await client.aclose()


async def test_a_rollout_whose_engine_is_gone_is_served_by_another() -> None:
    # Its own two engines: one of them is stopped.
    with launch("null", tokenizer="qwen-2.5") as first, launch("null", tokenizer="qwen-2.5") as second:
        with launch_gateway([first.url, second.url]) as gateway:
            async with SGLangClient(gateway.url, routing_key="gone", retry=Backoff(attempts=1)) as client:

                async def turn(n: int) -> GenerateResult:
                    return await client.generate(
                        [7, 8, 9, n], SamplingParams(max_new_tokens=2), rid_for_attempt=lambda a: make_rid("gone", n, a)
                    )

                served = await turn(0)
                with httpx.Client(timeout=10) as http:
                    owner = _holders([first, second], http)[served.rid]
                (first if owner == first.url else second).stop()
                again = await turn(1)
                assert again.finish == "length" and again.attempts == 1
                with httpx.Client(timeout=10) as http:
                    assert _holders([second if owner == first.url else first], http)[again.rid] != owner


async def test_the_runner_sends_its_rollout_uid_as_the_routing_key(
    engines: list[PolicyServerHandle], rl_gateway: GatewayHandle, tmp_path: Path
) -> None:
    # The model the runner's session builds for a spec (the same path a rollout pod takes).
    token = tmp_path / "token"
    token.write_text("t")
    env = RunnerEnv(
        ingest_url="http://127.0.0.1:9", namespace="ns", name="r", uid="0f4c2a9e-uid-of-the-rollout",
        ingest_token_file=str(token), swerex_url="http://127.0.0.1:9", swerex_token_file=str(token),
    )  # fmt: skip
    spec = api.SWERolloutSpec.model_validate({
        "instance": {
            "instanceId": "demo__calc-1", "repo": "demo/calc", "baseCommit": "abcdef0",
            "image": "registry.example/calc:1", "problemStatement": "add() is wrong",
            "evaluation": {"failToPass": ["tests/test_calc.py::test_add"]},
        },
        "inference": {"endpoint": rl_gateway.url, "tokenizer": "qwen-2.5", "sampling": {"maxNewTokens": 4}},
    })  # fmt: skip
    kind, _ = Runner(env)._model(spec, AgentConfig.from_spec(spec.agent), None)
    model, client = kind.model, kind.client
    assert isinstance(model, RLTokenModel) and client is not None
    assert client._http.headers[ROUTING_KEY_HEADER] == env.uid
    try:
        model.add_messages([{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix add()."}])
        for turn in range(5):
            await model.generate()
            model.add_messages([{"role": "user", "content": f"Observation {turn}: tests still fail."}])
    finally:
        await client.aclose()
    with httpx.Client(timeout=10) as http:
        mine = [
            (engine.url, record)
            for engine in engines
            for record in http.get(f"{engine.url}/_standin/requests").json()["requests"]
            if record["rid"].startswith("0f4c2a9e-uid-of-the-rollout-")
        ]
    assert len(mine) == 5 and len({url for url, _ in mine}) == 1, mine


async def test_an_abort_during_a_fleet_pause_closes_the_request_and_nothing_runs_after_continue(
    engines: list[PolicyServerHandle], rl_gateway: GatewayHandle, slow: None
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        found = await fleet.discover(http, rl_gateway.url)
        paused = await fleet.call_engines(http, found, "POST", "/pause_generation", {"mode": "in_place"}, timeout=10)
        assert all(a.ok for a in paused)
        client = SGLangClient(rl_gateway.url, routing_key="held", retry=Backoff(attempts=1))
        try:
            turn = _long(client, "held")  # 4,000 tokens at 20 ms: it cannot end by itself within the test
            await _until_running(engines, 1)  # held at its engine's pause gate
            assert await client.paused()
            # No rid is sent while paused (it would be lost there): the connection is closed.
            assert await client.abort_in_flight() == 0
            result = await asyncio.wait_for(turn, 60)
            assert result.finish == "abort"
        finally:
            await client.aclose()
            await fleet.call_engines(http, found, "POST", "/continue_generation", {}, timeout=10)
    # The gateway closed its request to the engine too: after continue nothing of it runs.
    for _ in range(500):
        if await _running(engines) == 0:
            break
        await asyncio.sleep(0.02)
    assert await _running(engines) == 0
