"""A demo-like batch for the viewer tests, made once per session from real parts.

Every trajectory is real: the runner's RLTokenModel talks token-in/token-out to the
real SGLang-compatible policy server (oracle and null policies, qwen-2.5 tokenizer),
exactly like `make demo` (bundled tasks, groups of two: member 0 oracle, member 1
null). One oracle member is aborted mid-turn by the server and resumed under new
weights (abort/resume markers, weight-version boundary). One more rollout carries a
hostile observation (script tags, HTML, a 200,000-character line, invalid UTF-8).
The rollouts' lifecycle (status timestamps, eval report) is written from what
happened in that run, without a cluster, and the file is written by the
`swerollout results` writer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_runner.policy.model import FinishReason
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import SamplingParams, SGLangClient
from swerollout.api.v1alpha1 import LABEL_BATCH, LABEL_MEMBER, LABEL_SAMPLE
from swerollout.backoff import Backoff
from swerollout.cli.results import write_jsonl, write_parquet
from swerollout.client.records import ANNOTATION_INSTANCE_ID, RolloutRecord, build_record
from swerollout.tokenizers import load_tokenizer
from swerollout.wire.trajectory import Trajectory
from swerollout_dev.policy_server.launch import launch

REPO = Path(__file__).resolve().parents[3]
TASKS = REPO / "examples" / "tasks" / "instances.jsonl"
BATCH = "demo"
TOKENIZER = "qwen-2.5"
TASK_COUNT = 3
ARTIFACTS = REPO / ".swerollout" / "test-artifacts" / "viewer"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the repository.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the current diff.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
HOSTILE_MARKUP = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"><b>bold?</b>'
# Invalid UTF-8 as the runner would hold it after decoding with surrogateescape.
INVALID_UTF8 = b"bytes: \xff\xfe\xc3( end".decode("utf-8", "surrogateescape")
HUGE_LINE = "A" * 200_000
# A 4x4 red PNG, as a problem statement's image would arrive inline; and a remote one.
INLINE_IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAQAAAAECAIAAAAmkwkpAAAAEElEQVR4nGP4z8AARwzEcQCukw/x0F8jngAAAABJRU5ErkJggg=="
REMOTE_IMAGE = "http://203.0.113.7/issue.png"


@dataclass
class DemoBatch:
    records: list[RolloutRecord]
    jsonl: Path
    parquet: Path
    aborted: str
    hostile: str


def _instances() -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in TASKS.read_text().splitlines() if line.strip()]
    return rows[:TASK_COUNT]


async def _run_member(
    url: str,
    problem: str,
    run_uid: str,
    *,
    observation: str = "applied the patch",
    before_turn: Any = None,
    on_abort: Any = None,
) -> Trajectory:
    client = SGLangClient(url, retry=Backoff(attempts=3, first_seconds=0.01))
    model = RLTokenModel(
        load_tokenizer(TOKENIZER),
        client,
        sampling=SamplingParams(max_new_tokens=2048, temperature=0.0),
        max_context_tokens=32768,
        run_uid=run_uid,
        tools=TOOLS,
    )
    model.add_messages(
        [
            {"role": "system", "content": "You are a software engineer. Fix the issue with the tools, then submit."},
            {"role": "user", "content": problem},
        ]
    )
    exit_status, submission = "exit_max_iter_out", ""
    try:
        for number in range(6):
            if before_turn is not None:
                await before_turn(number)
            turn = await model.generate()
            if turn.finish_reason == FinishReason.ABORT:
                await on_abort()
                continue
            names = [c.name for c in turn.tool_calls]
            if "submit" in names:
                exit_status = "submitted"
                break
            for call in turn.tool_calls:
                model.add_messages([{"role": "tool", "tool_call_id": call.id, "content": observation}])
                if "git apply" in str(call.arguments.get("command", "")):
                    submission = str(call.arguments["command"])
    finally:
        await client.aclose()
    return model.trajectory(exit_status=exit_status, submission=submission, timings={"total_seconds": 1.0})


def _object(
    name: str,
    sample: int,
    member: int,
    instance_id: str,
    trajectory: Trajectory,
    start: datetime,
    resolved: bool,
    graded: bool,
) -> dict[str, Any]:
    """The SWERollout object as the operator leaves it after this run (Succeeded)."""
    at = [(start + timedelta(seconds=s)).isoformat().replace("+00:00", "Z") for s in (0, 2, 5, 30, 41)]
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": at[0],
            "labels": {LABEL_BATCH: BATCH, LABEL_SAMPLE: str(sample), LABEL_MEMBER: str(member)},
            "annotations": {ANNOTATION_INSTANCE_ID: instance_id},
        },
        "spec": {"inference": {"endpoint": "http://127.0.0.1:30000", "tokenizer": TOKENIZER}},
        "status": {
            "phase": "Succeeded",
            "attempts": 1,
            "sandbox": {"podName": name, "startedAt": at[1]},
            "conditions": [{"type": "SandboxReady", "status": "True", "lastTransitionTime": at[2], "reason": "Ready"}],
            "result": {
                "exitStatus": trajectory.exit_status,
                "turns": trajectory.turns,
                "promptTokens": len(trajectory.prompt_ids),
                "responseTokens": len(trajectory.response_ids),
                "hasPatch": bool(trajectory.submission),
            },
            "evaluation": {"startedAt": at[3]},
            "reward": {"value": 1.0 if resolved else 0.0, "resolved": resolved, "graded": graded},
            "startTime": at[0],
            "completionTime": at[4],
        },
    }


def _report(instance: dict[str, Any], resolved: bool) -> dict[str, Any]:
    f2p, p2p = instance["FAIL_TO_PASS"], instance["PASS_TO_PASS"]
    return {
        "instance_id": instance["instance_id"],
        "resolved": resolved,
        "reward": 1.0 if resolved else 0.0,
        "graded": True,
        "message": f"FAIL_TO_PASS {len(f2p) if resolved else 0}/{len(f2p)}",
        "backend": "builtin",
        "parser": "parse_log_pytest",
        "patch_applied": resolved,
        "fail_to_pass": {"success": f2p if resolved else [], "failure": [] if resolved else f2p},
        "pass_to_pass": {"success": p2p, "failure": []},
    }


async def _make_batch(tmp: Path) -> DemoBatch:
    instances = _instances()
    tasks = tmp / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(i) + "\n" for i in instances))
    oracle = launch("oracle", tasks=tasks, tokenizer=TOKENIZER, weight_version="v1")
    flaky = launch("oracle", tasks=tasks, tokenizer=TOKENIZER, weight_version="v1")
    null = launch("null", tokenizer=TOKENIZER, weight_version="v1")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    records: list[RolloutRecord] = []

    async def abort_second_turn(number: int) -> None:
        if number == 1:
            async with httpx.AsyncClient(base_url=flaky.url) as http:
                (await http.post("/_standin/faults", json={"abort_after_tokens": 3})).raise_for_status()

    async def new_weights() -> None:
        async with httpx.AsyncClient(base_url=flaky.url) as http:
            (await http.post("/_standin/faults", json={"clear_abort_after_tokens": True})).raise_for_status()
            (await http.post("/update_weight_version", json={"new_version": "v2"})).raise_for_status()

    try:
        for sample, instance in enumerate(instances):
            problem = f"Task {instance['instance_id']}:\n{instance['problem_statement']}"
            for member in (0, 1):
                name = f"{BATCH}-{sample}-{member}"
                if member == 1:
                    trajectory = await _run_member(null.url, problem, f"uid-{name}")
                elif sample == 1:
                    trajectory = await _run_member(
                        flaky.url, problem, f"uid-{name}", before_turn=abort_second_turn, on_abort=new_weights
                    )
                else:
                    trajectory = await _run_member(oracle.url, problem, f"uid-{name}")
                resolved = member == 0
                obj = _object(
                    name,
                    sample,
                    member,
                    instance["instance_id"],
                    trajectory,
                    start + timedelta(seconds=3 * len(records)),
                    resolved,
                    graded=True,
                )
                records.append(build_record(obj, trajectory, _report(instance, resolved)))
        hostile_name = f"{BATCH}-{len(instances)}-0"
        hostile_observation = f"{HOSTILE_MARKUP}\n{HUGE_LINE}\n{INVALID_UTF8}"
        trajectory = await _run_member(
            oracle.url,
            f"Task {instances[0]['instance_id']}:\n{instances[0]['problem_statement']}",
            f"uid-{hostile_name}",
            # The tokenizer sees what the runner sends (invalid bytes replaced); the record keeps the raw text.
            observation=hostile_observation.encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
        )

        def hostile(message: dict[str, Any]) -> dict[str, Any]:
            if message.get("role") == "tool":
                return {**message, "content": hostile_observation}
            if message.get("role") == "user":  # a multimodal problem statement: one inline image, one remote
                return {
                    **message,
                    "content": [
                        {"type": "text", "text": str(message["content"])},
                        {"type": "image_url", "image_url": {"url": INLINE_IMAGE}},
                        {"type": "image_url", "image_url": {"url": REMOTE_IMAGE}},
                    ],
                }
            return message

        trajectory.messages = [hostile(m) for m in trajectory.messages]
        trajectory.submission = f"diff --git a/x b/x\n+{HOSTILE_MARKUP}\n"
        obj = _object(hostile_name, len(instances), 0, "hostile__xss-1", trajectory, start, False, graded=False)
        obj["status"]["reward"] = {"value": 0.0, "resolved": False, "graded": False}
        records.append(build_record(obj, trajectory))
    finally:
        for server in (oracle, flaky, null):
            server.stop()
    jsonl, parquet = tmp / "results.jsonl", tmp / "results.parquet"
    write_jsonl(records, jsonl)
    write_parquet(records, parquet)
    return DemoBatch(records, jsonl, parquet, aborted=f"{BATCH}-1-0", hostile=hostile_name)


@pytest.fixture(scope="session")
def demo_batch(tmp_path_factory: pytest.TempPathFactory) -> DemoBatch:
    tmp = tmp_path_factory.mktemp("viewer-demo")
    # Its own thread: Playwright's sync API may already run an event loop on this one.
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(_make_batch(tmp))).result()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium (hack/install-system-deps.sh), driven by Playwright.

    Module-scoped: Playwright's sync API runs an event loop on this thread while it is
    open, which would break the asyncio tests that run after this module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # Playwright gives every launch a fresh, temporary user-data-dir.
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=120_000)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.errors = errors
    yield page
    context.close()


@pytest.fixture
def screenshot() -> Any:
    """Keep a screenshot of a page as a test artifact (.swerollout/test-artifacts/viewer/NAME.png)."""

    def take(page: Any, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=False)
        return path

    return take
