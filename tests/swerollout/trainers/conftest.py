"""The trainer adapters' tests share ONE embedded default (`swerollout dev up`, oracle
policy) and ONE small real batch on it: two bundled tasks x a group of two, member 0 on
the oracle policy (solves the task, reward 1) and member 1 on the null policy (reward 0).
The live hooks (verl's agent loop and manager, AReaL's workflow) add their own rollouts
only where they must run for real: a pause or an abort in the middle of a step."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from swerollout.client import AsyncRolloutClient, RolloutRecord
from swerollout.trainers._settings import AdapterSettings
from swerollout_dev.policy_server.launch import launch
from tests.support.devstack import DevStack, running_dev_stack

# siiRL opens a log file under ./siirl_logs when it is imported (and logs INFO to stderr):
# keep it out of the checkout. Set before test_siirl.py (and the example it starts) import siiRL.
os.environ.setdefault("SIIRL_LOG_DIRECTORY", tempfile.mkdtemp(prefix="siirl-logs-"))
os.environ.setdefault("LOGURU_LEVEL", "WARNING")

SHARED_BATCH = "trainers-shared"
TASKS = 2
GROUP = 2
# Long enough to abort in the middle, short enough to finish: tiny-lm's random text is
# never a valid action, so the run ends on max turns (reward 0, ungraded).
SLOW_AGENT = {"maxTurns": 5, "maxRequeries": 20}
SLOW_SAMPLING = {"maxNewTokens": 24, "temperature": 1.0}


@dataclass
class Stack:
    """The embedded default and what the adapters need to reach it."""

    stack: DevStack

    def settings(self, **overrides: Any) -> AdapterSettings:
        raw: dict[str, Any] = {
            "endpoints": [self.stack.oracle_url],
            "tokenizer": "qwen-2.5",
            "kubeconfig": str(self.stack.paths.kubeconfig),
            "namespace": "default",
            "store_url": self.stack.store_dir.as_uri(),
            "batch_prefix": "tr",
            "sandbox": {"startupTimeoutSeconds": 900},
            "timeout_seconds": 900,
        }
        raw.update(overrides)
        return AdapterSettings.model_validate(raw)

    def instance_row(self, task: int) -> dict[str, Any]:
        """A dataset row as a SWE dataset publishes it (what a trainer's parquet holds)."""
        return self.stack.instances[task].model_dump(mode="json")


@dataclass
class Shared(Stack):
    """The stack plus the records of the one shared batch."""

    null_url: str
    records: list[RolloutRecord]


async def _run_shared_batch(stack: DevStack, null_url: str) -> list[RolloutRecord]:
    async with AsyncRolloutClient.connect(
        stack.paths.kubeconfig, namespace="default", store_url=stack.store_dir.as_uri()
    ) as client:
        inference = {"endpoint": stack.oracle_url, "tokenizer": "qwen-2.5"}
        await client.submit_batch(
            [stack.instances[i] for i in range(TASKS)],
            GROUP,
            batch=SHARED_BATCH,
            inference=inference,
            weight_version="7",
            sandbox={"startupTimeoutSeconds": 900},
            member_inference=[inference, {**inference, "endpoint": null_url}],
        )
        await client.wait(SHARED_BATCH, timeout=900)
        return await client.results(SHARED_BATCH)


@pytest.fixture(scope="session")
def trainer_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    with running_dev_stack(tmp_path_factory.mktemp("trainers-devstack")) as stack:
        yield stack


@pytest.fixture(scope="session")
def null_policy(trainer_stack: DevStack) -> Iterator[str]:
    with launch("null", subprocess=True, tokenizer="qwen-2.5") as server:
        yield server.url


@pytest.fixture(scope="session")
def slow_policy(trainer_stack: DevStack) -> Iterator[str]:
    """tiny-lm (real sampling, real logprobs) slowed down so a pause lands mid-generation;
    integer weight versions, as verl and AReaL count them."""
    with launch(
        "tiny-lm", subprocess=True, tokenizer="qwen-2.5", weight_version="1", faults={"delay_per_token": 0.08}
    ) as server:
        yield server.url


@pytest.fixture(scope="session")
def slow_oracle(trainer_stack: DevStack) -> Iterator[str]:
    """The oracle (solves the bundled tasks: reward 1) slowed so a pause lands in the middle
    of its first turn; integer weight versions, as the trainers count them."""
    with launch(
        "oracle",
        subprocess=True,
        tokenizer="qwen-2.5",
        tasks=trainer_stack.workdir / "tasks" / "instances.jsonl",
        weight_version="1",
        faults={"delay_per_token": 0.05},
    ) as server:
        yield server.url


@pytest.fixture(scope="session")
def stack(trainer_stack: DevStack) -> Stack:
    return Stack(trainer_stack)


@pytest.fixture(scope="session")
def shared(trainer_stack: DevStack, null_policy: str) -> Shared:
    records = asyncio.run(_run_shared_batch(trainer_stack, null_policy))
    assert len(records) == TASKS * GROUP
    return Shared(trainer_stack, null_policy, records)
