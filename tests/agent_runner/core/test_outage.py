"""An inference outage (server down, 5xx, inference-side aborts) is waited out within
spec.inference.outageBudgetSeconds, against the real SGLang-compatible policy server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from agent_runner.pod.session import AbortableModel
from agent_runner.policy.errors import ModelUnavailableError
from agent_runner.policy.model import FinishReason
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import SamplingParams, SGLangClient
from swerollout.api import v1alpha1 as api
from swerollout.tokenizers import load_tokenizer
from tests.support.runner_core_fakes import ORACLE_INSTANCE

PROMPT = [
    {"role": "system", "content": "You are a software engineer."},
    {"role": "user", "content": f"Task {ORACLE_INSTANCE['instance_id']}: {ORACLE_INSTANCE['problem_statement']}"},
]


def _abortable(url: str, budget: float) -> AbortableModel:
    inner = RLTokenModel(
        load_tokenizer("qwen-2.5"),
        SGLangClient(url),
        sampling=SamplingParams(max_new_tokens=64, temperature=0.0),
        max_context_tokens=8192,
        run_uid="uid-outage",
        tool_call_format=None,
    )
    inner.add_messages(PROMPT)
    return AbortableModel(inner, inner.client.abort_in_flight, outage_budget=budget)


async def _until(what: str, probe: Callable[[], bool], timeout: float = 120) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not probe():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_the_budget_is_a_spec_field_with_a_default_of_minutes() -> None:
    assert api.Inference(endpoint="http://h:1").outage_budget_seconds == 600
    with pytest.raises(ValueError, match="outageBudgetSeconds"):
        api.Inference.model_validate({"endpoint": "http://h:1", "outageBudgetSeconds": -1})


async def test_a_server_that_goes_away_and_comes_back_is_waited_out(
    oracle_server: Callable[..., Any], free_port_url: str
) -> None:
    port = urlparse(free_port_url).port
    model = _abortable(free_port_url, budget=300)
    turn_task = asyncio.create_task(model.generate())
    try:
        # Nothing listens yet: the turn fails, is retried, and waits.
        await _until("a retry after connection errors", lambda: model.outage_retries >= 1)
        assert not turn_task.done()
        server = await asyncio.to_thread(oracle_server, port=port)
        turn = await asyncio.wait_for(turn_task, timeout=180)
    finally:
        turn_task.cancel()
    assert turn.finish_reason is not FinishReason.ABORT and turn.new_tokens > 0
    assert server.url == free_port_url
    inner = model.inner
    assert isinstance(inner, RLTokenModel)
    kept = [t for t in inner.state.turns if t.kept]
    assert len(kept) == 1, "the turn is appended once, whatever it took to get it"
    assert sum(inner.buffer.loss_mask) == turn.new_tokens


async def test_5xx_answers_are_waited_out(oracle_server: Callable[..., Any]) -> None:
    server = await asyncio.to_thread(oracle_server)
    async with httpx.AsyncClient() as http:
        # More failures in a row than the client's own quick retries absorb.
        (await http.post(f"{server.url}/_standin/faults", json={"fail_next": 9})).raise_for_status()
    model = _abortable(server.url, budget=300)
    turn = await asyncio.wait_for(model.generate(), timeout=180)
    assert turn.finish_reason is not FinishReason.ABORT and turn.new_tokens > 0
    assert model.outage_retries >= 1


async def test_past_the_budget_the_turn_fails_naming_the_field(free_port_url: str) -> None:
    model = _abortable(free_port_url, budget=0)
    with pytest.raises(ModelUnavailableError, match=r"spec\.inference\.outageBudgetSeconds \(0 s\).*connect"):
        await asyncio.wait_for(model.generate(), timeout=120)


async def test_a_suspension_during_an_outage_ends_the_wait(free_port_url: str) -> None:
    model = _abortable(free_port_url, budget=300)
    turn_task = asyncio.create_task(model.generate())
    await _until("a retry after connection errors", lambda: model.outage_retries >= 1)
    await model.request_abort()
    turn = await asyncio.wait_for(turn_task, timeout=60)
    assert turn.finish_reason is FinishReason.ABORT
