"""RLTokenModel against the real SGLang-compatible policy server (and the fault server)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from agent_runner.policy.errors import ContextBudgetError, ModelError, SnapshotError
from agent_runner.policy.model import FinishReason
from agent_runner.policy.rl_model import RLTokenModel
from agent_runner.policy.sglang import ContextLimits, SamplingParams, SGLangClient
from swerollout.backoff import Backoff
from swerollout.tokenizers import load_tokenizer
from swerollout.wire.trajectory import Trajectory
from tests.support.runner_core_fakes import ORACLE_INSTANCE, Behaviour, FakeSGLang

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {"name": "submit", "description": "Submit.", "parameters": {"type": "object", "properties": {}}},
    },
]
PROMPT = [
    {"role": "system", "content": "You are a software engineer. Use the tools."},
    {"role": "user", "content": f"Task {ORACLE_INSTANCE['instance_id']}: {ORACLE_INSTANCE['problem_statement']}"},
]


def _model(url: str, **kw: Any) -> RLTokenModel:
    client = SGLangClient(url, retry=Backoff(attempts=3, first_seconds=0.01))
    defaults: dict[str, Any] = {
        "sampling": SamplingParams(max_new_tokens=512, temperature=0.0),
        "max_context_tokens": 8192,
        "run_uid": "uid-test",
        "tools": TOOLS,
    }
    defaults.update(kw)
    return RLTokenModel(load_tokenizer("qwen-2.5"), client, **defaults)


def _assert_turn_appended(model: RLTokenModel, before: list[int], new_tokens: int) -> None:
    """The list is the previous request + exactly the sampled output (mask 1)."""
    buf = model.buffer
    assert buf.input_ids[: len(before)] == before
    assert len(buf) == len(before) + new_tokens
    assert list(buf.loss_mask[len(before) :]) == [1] * new_tokens
    # Context tokens carry logprob 0.0 (the scripted policy's sampled tokens also report 0.0).
    assert all(lp == 0.0 for lp, m in zip(buf.logprobs, buf.loss_mask) if m == 0)


async def test_multi_turn_tool_conversation_against_policy_server(oracle_server: Callable[..., Any]) -> None:
    server = oracle_server(weight_version="v1")
    model = _model(server.url)
    model.add_messages(PROMPT)
    requests: list[list[int]] = []

    turn = await model.generate()
    requests.append(model.buffer.input_ids[: model.buffer.prompt_length])
    assert turn.finish_reason == FinishReason.STOP and turn.parse_error is None
    assert [c.name for c in turn.tool_calls] == ["bash"]
    assert "git apply" in turn.tool_calls[0].arguments["command"]
    _assert_turn_appended(model, requests[0], turn.new_tokens)
    assert model.buffer.input_ids[-1] == model.tokenizer.convert_tokens_to_ids("<|im_end|>")

    after_first = list(model.buffer.input_ids)
    model.add_messages([{"role": "tool", "tool_call_id": turn.tool_calls[0].id, "content": "applied"}])
    second = await model.generate()
    assert [c.name for c in second.tool_calls] == ["submit"]
    # The second request extended the first request's input_ids + output_ids.
    assert model.buffer.input_ids[: len(after_first)] == after_first
    delta_end = len(model.buffer) - second.new_tokens
    delta = model.buffer.input_ids[len(after_first) : delta_end]
    assert model.tokenizer.decode(delta).startswith("\n<|im_start|>user\n<tool_response>\napplied")
    assert set(model.buffer.loss_mask[len(after_first) : delta_end]) == {0}
    assert set(model.buffer.weight_versions[delta_end:]) == {"v1"}

    traj = model.trajectory(exit_status="submitted", submission="diff")
    assert traj.turns == 2 and traj.sampled_tokens == turn.new_tokens + second.new_tokens
    assert traj.prompt_ids + traj.response_ids == model.buffer.input_ids
    assert Trajectory.from_bytes(traj.to_bytes()).response_ids == traj.response_ids
    assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert traj.info["rids"][0].startswith("uid-test-t0001-a01-")
    await model.client.aclose()


async def test_abort_mid_turn_then_snapshot_restore_continue(oracle_server: Callable[..., Any]) -> None:
    server = oracle_server(weight_version="v1", faults={"abort_after_tokens": 3})
    model = _model(server.url, max_sampled_tokens=10_000)
    model.add_messages(PROMPT)
    aborted = await model.generate()
    assert aborted.finish_reason == FinishReason.ABORT and aborted.new_tokens == 0
    # Drop policy: the three aborted tokens are not in the list; it ends with the generation prompt.
    prompt = model.buffer.input_ids[: model.buffer.prompt_length]
    assert model.buffer.input_ids == prompt and model.buffer.sampled_tokens == 0
    assert model.state.sampled_total == 3 and model.state.dropped_total == 3

    blob = model.snapshot({"turns": 0, "editor_history": {"a.py": ["x"]}})
    await model.client.aclose()

    async with httpx.AsyncClient(base_url=server.url) as http:
        (await http.post("/_standin/faults", json={"clear_abort_after_tokens": True})).raise_for_status()
        (await http.post("/update_weight_version", json={"new_version": "v2"})).raise_for_status()

    resumed, agent_state = RLTokenModel.restore(
        blob,
        load_tokenizer("qwen-2.5"),
        SGLangClient(server.url),
        sampling=SamplingParams(max_new_tokens=512, temperature=0.0),
        max_context_tokens=8192,
        run_uid="uid-test",
        tools=TOOLS,
        max_sampled_tokens=10_000,
    )
    assert agent_state == {"turns": 0, "editor_history": {"a.py": ["x"]}}
    assert resumed.messages == model.messages and resumed.buffer.input_ids == prompt
    turn = await resumed.generate()
    assert turn.finish_reason == FinishReason.STOP and turn.tool_calls[0].name == "bash"
    _assert_turn_appended(resumed, prompt, turn.new_tokens)
    assert set(resumed.buffer.weight_versions[len(prompt) :]) == {"v2"}
    assert resumed.state.sampled_total == 3 + turn.new_tokens  # the budget remembers the dropped tokens
    rids = [t.rid for t in resumed.state.turns]
    assert rids[0].startswith("uid-test-t0001-") and rids[1].startswith("uid-test-t0002-")
    log = resumed.trajectory(exit_status=None).info["turn_log"]
    assert [(t["finish"], t["kept"], t["weight_version"]) for t in log] == [
        ("abort", False, "v1"),
        ("stop", True, "v2"),
    ]
    await resumed.client.aclose()


async def test_keep_on_abort_continues_the_turn_with_each_token_s_version(oracle_server: Callable[..., Any]) -> None:
    """onAbort Keep: the aborted request's tokens stay (with v1), the resumed request after a
    snapshot continues the same turn (with v2), and the whole turn parses as one tool call."""
    server = oracle_server(weight_version="v1", faults={"abort_after_tokens": 3})
    model = _model(server.url, keep_aborted=True, max_sampled_tokens=10_000)
    model.add_messages(PROMPT)
    aborted = await model.generate()
    assert aborted.finish_reason == FinishReason.ABORT and aborted.new_tokens == 3
    prompt_length = model.buffer.prompt_length
    assert model.buffer.sampled_tokens == 3 and model.state.dropped_total == 0
    assert model.buffer.weight_versions[prompt_length:] == ["v1"] * 3
    blob = model.snapshot({})
    await model.client.aclose()

    async with httpx.AsyncClient(base_url=server.url) as http:
        (await http.post("/_standin/faults", json={"clear_abort_after_tokens": True})).raise_for_status()
        (await http.post("/update_weight_version", json={"new_version": "v2"})).raise_for_status()
    resumed, _ = RLTokenModel.restore(
        blob,
        load_tokenizer("qwen-2.5"),
        SGLangClient(server.url),
        sampling=SamplingParams(max_new_tokens=512, temperature=0.0),
        max_context_tokens=8192,
        run_uid="uid-test",
        tools=TOOLS,
        keep_aborted=True,
    )
    turn = await resumed.generate()
    assert turn.finish_reason == FinishReason.STOP and [c.name for c in turn.tool_calls] == ["bash"]
    assert "git apply" in turn.tool_calls[0].arguments["command"]
    buf = resumed.buffer
    # The resumed request sent the kept tokens and continued after them.
    assert list(buf.loss_mask[prompt_length:]) == [1] * (3 + turn.new_tokens)
    assert buf.weight_versions[prompt_length:] == ["v1"] * 3 + ["v2"] * turn.new_tokens
    traj = resumed.trajectory(exit_status=None)
    assert traj.turns == 1 and traj.info["dropped_total"] == 0 and traj.info["kept_tokens"] == 3 + turn.new_tokens
    assert traj.info["mixed_version_turns"] == [{"start": 0, "end": 3 + turn.new_tokens, "versions": ["v1", "v2"]}]
    log = traj.info["turn_log"]
    assert [(t["finish"], t["kept"], t["kept_tokens"]) for t in log] == [
        ("abort", True, 3),
        ("stop", True, turn.new_tokens),
    ]
    await resumed.client.aclose()


async def test_keep_on_abort_counts_the_kept_tokens_in_the_turn_cap(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script.append(Behaviour("abort", output_ids=[5, 6, 7]))
    model = _model(fake_sglang.url, keep_aborted=True, sampling=SamplingParams(max_new_tokens=10))
    model.add_messages(PROMPT)
    assert (await model.generate()).finish_reason == FinishReason.ABORT
    fake_sglang.default_output = [8, 9]
    turn = await model.generate()
    assert fake_sglang.requests[1]["sampling_params"]["max_new_tokens"] == 7
    assert fake_sglang.requests[1]["input_ids"][-3:] == [5, 6, 7]
    assert turn.new_tokens == 2 and model.buffer.input_ids[-5:] == [5, 6, 7, 8, 9]
    # Kept tokens that fill the cap end the turn as cut off, without a request.
    fake_sglang.script.append(Behaviour("abort", output_ids=list(range(20, 30))))
    model.add_messages([{"role": "user", "content": "again"}])
    assert (await model.generate()).finish_reason == FinishReason.ABORT
    cut = await model.generate()
    assert cut.finish_reason == FinishReason.LENGTH and len(fake_sglang.requests) == 3
    assert model.buffer.input_ids[-10:] == list(range(20, 30))
    await model.client.aclose()


async def test_keep_on_abort_drops_tokens_without_logprobs(fake_sglang: FakeSGLang) -> None:
    fake_sglang.script.append(Behaviour("abort", output_ids=[5, 6, 7]))
    fake_sglang.meta_patches.append({"output_token_logprobs": [[-0.5, 5, None]]})
    model = _model(fake_sglang.url, keep_aborted=True)
    model.add_messages(PROMPT)
    aborted = await model.generate()
    assert aborted.new_tokens == 1 and model.buffer.input_ids[-1] == 5 and model.buffer.logprobs[-1] == -0.5
    assert model.state.dropped_total == 2 and model.state.sampled_total == 3
    await model.client.aclose()


async def test_length_cut_turn_is_closed_before_the_next_message(oracle_server: Callable[..., Any]) -> None:
    server = oracle_server()
    model = _model(server.url)
    model.add_messages(PROMPT)
    cut = await model.generate(max_new_tokens=5)
    assert cut.finish_reason == FinishReason.LENGTH and cut.new_tokens == 5
    before = list(model.buffer.input_ids)
    model.add_messages([{"role": "user", "content": "Your reply was cut off; continue."}])
    await model.generate(max_new_tokens=1)
    im_end = model.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert model.buffer.input_ids[len(before)] == im_end and model.buffer.loss_mask[len(before)] == 0
    await model.client.aclose()


async def test_budgets_cap_max_new_tokens(fake_sglang: FakeSGLang) -> None:
    model = _model(fake_sglang.url, tools=None, max_context_tokens=500, max_sampled_tokens=5)
    model.add_messages([{"role": "user", "content": "hi"}])
    prompt_len = len(model.template.prompt_ids(model.messages))
    fake_sglang.script.append(Behaviour(output_ids=[11, 12, 13]))
    await model.generate(max_new_tokens=100)
    sent = fake_sglang.requests[-1]
    assert sent["sampling_params"]["max_new_tokens"] == 5
    assert sent["input_ids"] == model.buffer.input_ids[:prompt_len]
    # Two of the five sampled-token budget are left.
    model.add_messages([{"role": "user", "content": "more"}])
    fake_sglang.script.append(Behaviour(output_ids=[14, 15]))
    await model.generate()
    assert fake_sglang.requests[-1]["sampling_params"]["max_new_tokens"] == 2
    model.add_messages([{"role": "user", "content": "again"}])
    with pytest.raises(ContextBudgetError, match="maxSampledTokens is 5"):
        await model.generate()
    await model.client.aclose()


async def test_context_room_caps_max_new_tokens(fake_sglang: FakeSGLang) -> None:
    probe = _model(fake_sglang.url, tools=None)
    prompt_len = len(probe.template.prompt_ids([{"role": "user", "content": "hi"}]))
    model = _model(fake_sglang.url, tools=None, max_context_tokens=prompt_len + 2)
    model.add_messages([{"role": "user", "content": "hi"}])
    await model.generate(max_new_tokens=100)
    assert fake_sglang.requests[-1]["sampling_params"]["max_new_tokens"] == 2
    await model.client.aclose()
    await probe.client.aclose()


async def test_full_context_raises_context_budget_error(fake_sglang: FakeSGLang) -> None:
    model = _model(fake_sglang.url, max_context_tokens=10)
    model.add_messages([{"role": "user", "content": "a long enough prompt to fill ten tokens of context"}])
    with pytest.raises(ContextBudgetError, match="max_context_tokens is 10"):
        await model.generate()
    assert fake_sglang.requests == []
    await model.client.aclose()


async def test_several_add_messages_render_as_one_step(fake_sglang: FakeSGLang) -> None:
    tok = load_tokenizer("qwen-2.5")
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    model = _model(fake_sglang.url)
    model.add_messages(PROMPT)
    fake_sglang.script.append(Behaviour(output_ids=[*tok.encode("ok", add_special_tokens=False), im_end]))
    await model.generate()
    model.add_messages([{"role": "tool", "tool_call_id": "a", "content": "one"}])
    model.add_messages([{"role": "tool", "tool_call_id": "b", "content": "two"}])
    await model.generate()
    text = tok.decode(model.buffer.input_ids)
    assert fake_sglang.requests[-1]["input_ids"] == model.buffer.input_ids[: len(fake_sglang.requests[-1]["input_ids"])]
    assert "<tool_response>\none\n</tool_response>\n<tool_response>\ntwo\n</tool_response>" in text
    assert text.count("<|im_start|>user") == 2  # both results in one user turn
    await model.client.aclose()


async def test_parse_error_reaches_the_turn(fake_sglang: FakeSGLang) -> None:
    tok = load_tokenizer("qwen-2.5")
    bad = tok.encode('<tool_call>\n{"name": "bash", "arguments": {oops}}\n</tool_call>', add_special_tokens=False)
    fake_sglang.script.append(Behaviour(output_ids=[*bad, tok.convert_tokens_to_ids("<|im_end|>")]))
    model = _model(fake_sglang.url)
    model.add_messages(PROMPT)
    turn = await model.generate()
    assert turn.tool_calls == [] and turn.parse_error and "not valid JSON" in turn.parse_error
    assert model.messages[-1]["content"] == turn.text
    await model.client.aclose()


async def test_messages_after_abort_must_wait_for_the_resampled_turn(fake_sglang: FakeSGLang) -> None:
    model = _model(fake_sglang.url)
    model.add_messages(PROMPT)
    fake_sglang.script.append(Behaviour("abort", output_ids=[5, 6]))
    assert (await model.generate()).finish_reason == FinishReason.ABORT
    model.add_messages([{"role": "user", "content": "x"}])
    with pytest.raises(ModelError, match="re-sample the interrupted turn"):
        await model.generate()
    await model.client.aclose()


def test_corrupted_or_newer_snapshot_is_refused() -> None:
    from agent_runner.policy.rl_model import Snapshot
    from agent_runner.policy.tokens import TokenBuffer
    from swerollout.wire.codec import decode, encode

    model = RLTokenModel(
        load_tokenizer("qwen-2.5"),
        SGLangClient("http://127.0.0.1:9"),
        sampling=SamplingParams(),
        max_context_tokens=100,
        run_uid="u",
    )
    blob = bytearray(model.snapshot({"k": 1}))
    blob[-1] ^= 0xFF
    with pytest.raises(SnapshotError, match="checksum"):
        Snapshot.from_bytes(bytes(blob))
    good = decode(model.snapshot({}), kind="snapshot")
    newer = encode("snapshot", {**good.meta, "schema_version": 2}, dict(good.arrays))
    with pytest.raises(SnapshotError, match="schema v2"):
        Snapshot.from_bytes(newer)
    with pytest.raises(SnapshotError, match="expected a 'snapshot'"):
        Snapshot.from_bytes(Trajectory().to_bytes())
    assert Snapshot(state=model.state, buffer=TokenBuffer()).to_bytes()


@pytest.mark.parametrize("tokenizer", ["deepseek-v3.1", "qwen-3"])
async def test_text_agent_multi_turn_equals_template_rendering(
    oracle_server: Callable[..., Any], tokenizer: str
) -> None:
    # No tools: the oracle answers in the fenced-bash text format, ending each turn with
    # the template's end-of-turn token. The token list then decodes to exactly the
    # template's rendering of the conversation.
    server = oracle_server(tokenizer=tokenizer)
    tok = load_tokenizer(tokenizer)
    model = RLTokenModel(
        tok,
        SGLangClient(server.url),
        sampling=SamplingParams(max_new_tokens=1024, temperature=0.0),
        max_context_tokens=8192,
        run_uid="uid-text",
        tool_call_format=None,
        template_kwargs={"enable_thinking": False} if tokenizer == "qwen-3" else None,
    )
    model.add_messages([{"role": "user", "content": PROMPT[1]["content"]}])
    first = await model.generate()
    assert "```bash" in first.text and first.tool_calls == []
    previous = list(model.buffer.input_ids)
    model.add_messages([{"role": "user", "content": "Observation: patch applied"}])
    second = await model.generate()
    assert "submit" in second.text
    assert model.buffer.input_ids[: len(previous)] == previous
    rendered = model.template.render(model.messages, add_generation_prompt=False)
    decoded = tok.decode(model.buffer.input_ids)
    if tokenizer == "qwen-3":
        # Documented difference: Qwen3's generation prompt (thinking off) opens an empty
        # <think></think> that the template leaves out of turns before the last user message.
        assert decoded.count("<think>\n\n</think>\n\n") == 2 and rendered.count("<think>\n\n</think>\n\n") == 1
        decoded = decoded.replace("<think>\n\n</think>\n\n", "", 1)
    assert rendered.startswith(decoded) and rendered[len(decoded) :].strip() == ""
    await model.client.aclose()


async def _two_turns(fake_sglang: FakeSGLang, model: RLTokenModel, bodies: list[dict[str, Any]] | None = None) -> None:
    """Two turns, a tool reply between them; ``bodies`` edit the answers' meta_info."""
    tok = model.tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    model.add_messages(PROMPT)
    for i, text in enumerate(["look", "done"]):
        fake_sglang.default_output = [*tok.encode(text, add_special_tokens=False), im_end]
        if bodies is not None:
            fake_sglang.meta_patches.append(bodies[i])
        turn = await model.generate()
        assert turn.finish_reason is FinishReason.STOP
        if i == 0:
            model.add_messages([{"role": "user", "content": "ok"}])


async def test_routed_experts_one_row_per_token_read(fake_sglang: FakeSGLang) -> None:
    fake_sglang.routed_width = 4
    model = _model(fake_sglang.url, return_routed_experts=True)
    await _two_turns(fake_sglang, model)
    first, second = fake_sglang.requests
    assert first["routed_experts_start_len"] == 0
    # The second turn asks only for rows after those stored: every token read so far but the last sampled one.
    assert second["routed_experts_start_len"] == len(first["input_ids"]) + len(fake_sglang.default_output) - 1
    traj = Trajectory.from_bytes(model.trajectory(exit_status="submitted").to_bytes())
    rows = traj.routed_experts_array()
    total = len(traj.prompt_ids) + len(traj.response_ids)
    # One row per token: the final sampled token was never forwarded, its row is zero filler.
    assert rows is not None and rows.shape == (total, 4) and traj.routed_experts_forwarded == total - 1
    assert rows[:-1, 0].tolist() == [p * 10 for p in range(total - 1)]  # row p belongs to token p
    assert rows[-1].tolist() == [0, 0, 0, 0]
    verl, slime = traj.routed_experts_for_verl(layers=2), traj.routed_experts_for_slime(layers=2)
    assert verl is not None and verl.shape == (total, 2, 2)
    assert slime is not None and slime.shape == (total - 1, 2, 2) and slime[5].tolist() == [[50, 51], [52, 53]]
    assert "notes" not in traj.info
    await model.client.aclose()


async def test_routed_experts_cover_a_trailing_delta_with_filler(fake_sglang: FakeSGLang) -> None:
    """A run that ends with environment tokens the server never read (the context edge) still
    stores one row per token; the forwarded count says where the server's rows end."""
    fake_sglang.routed_width = 2
    model = _model(fake_sglang.url, return_routed_experts=True, max_context_tokens=400)
    model.add_messages(PROMPT)
    tok = model.tokenizer
    fake_sglang.default_output = [
        *tok.encode("look", add_special_tokens=False),
        tok.convert_tokens_to_ids("<|im_end|>"),
    ]
    await model.generate()
    read = len(model.buffer) - 1
    model.add_messages([{"role": "user", "content": "x " * 400}])
    with pytest.raises(ContextBudgetError):
        await model.generate()
    traj = Trajectory.from_bytes(model.trajectory(exit_status="exit_context").to_bytes())
    rows = traj.routed_experts_array()
    assert rows is not None and rows.shape[0] == len(traj.prompt_ids) + len(traj.response_ids) > read + 1
    assert traj.routed_experts_forwarded == read
    assert not rows[read:].any()
    await model.client.aclose()


async def test_routed_experts_missing_is_said(fake_sglang: FakeSGLang) -> None:
    model = _model(fake_sglang.url, return_routed_experts=True)  # the server sends none
    await _two_turns(fake_sglang, model)
    traj = Trajectory.from_bytes(model.trajectory(exit_status="submitted").to_bytes())
    assert traj.routed_experts is None
    assert any("--enable-return-routed-experts" in note for note in traj.info["notes"])
    await model.client.aclose()


async def test_default_version_falls_back_to_the_spec_and_sources_are_recorded(fake_sglang: FakeSGLang) -> None:
    model = _model(fake_sglang.url, weight_version="spec-v3")
    await _two_turns(
        fake_sglang,
        model,
        [
            {"weight_version": "default"},  # a real server before any trainer set a version
            {
                "weight_version": "v2",
                "weight_versions": [
                    {"version": "default", "start": 0, "end": 1},
                    {"version": "v2", "start": 1, "end": 99},
                ],
            },
        ],
    )
    traj = Trajectory.from_bytes(model.trajectory(exit_status="submitted").to_bytes())
    sampled = [v for v, m in zip(traj.weight_versions, traj.loss_mask) if m]
    turn2 = len(fake_sglang.default_output)
    assert sampled[: len(sampled) - turn2] == ["spec-v3"] * (len(sampled) - turn2)
    assert sampled[len(sampled) - turn2 :] == ["spec-v3"] + ["v2"] * (turn2 - 1)  # the span's mixed turn
    assert traj.info["weight_version_sources"] == {"spec-v3": "spec", "v2": "server"}
    await model.client.aclose()


async def test_server_limits_cap_the_request_and_end_the_run_with_context_error(fake_sglang: FakeSGLang) -> None:
    model = _model(fake_sglang.url, max_context_tokens=100_000)
    model.add_messages(PROMPT)
    model._prepare_request()  # noqa: SLF001 - the prompt's size decides the limits below
    prompt = len(model.buffer)
    model.server_limits = ContextLimits.of(prompt + 20)  # max_req_len = ctx - 1, input limit = ctx - 6
    fake_sglang.default_output = [11, 12]
    await model.generate()
    assert fake_sglang.requests[0]["sampling_params"]["max_new_tokens"] == 18  # max_req_len - prompt - 1
    model.add_messages([{"role": "user", "content": "more " * 10}])
    with pytest.raises(ContextBudgetError, match="the server admits prompts below"):
        await model.generate()
    assert len(fake_sglang.requests) == 1  # refused here, never sent for a 400
    await model.client.aclose()


async def test_a_turn_spanning_a_weight_update_keeps_per_token_versions_to_the_client_record(
    oracle_server: Callable[..., Any],
) -> None:
    """In-place pause mid-turn, weights updated, continue: one turn of two versions,
    from SGLang's spans through the trajectory blob to the trainer's record."""
    import asyncio

    from swerollout.client.records import build_record

    server = oracle_server(weight_version="step-0", faults={"delay_per_token": 0.02})
    model = _model(server.url)
    model.add_messages(PROMPT)
    turn_task = asyncio.create_task(model.generate())
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        for _ in range(2000):  # until the turn has output (a condition, not a sleep)
            load = (await http.get("/v1/loads")).json()["loads"][0]
            if load["num_running_reqs"] == 1 and load["num_used_tokens"] > len(model.buffer) + 2:
                break
            await asyncio.sleep(0.01)
        (await http.post("/pause_generation", json={"mode": "in_place"})).raise_for_status()
        update = {"new_version": "step-1", "abort_all_requests": False}
        (await http.post("/update_weight_version", json=update)).raise_for_status()
        (await http.post("/continue_generation", json={})).raise_for_status()
    turn = await turn_task
    assert turn.finish_reason == FinishReason.STOP
    traj = Trajectory.from_bytes(model.trajectory(exit_status="submitted").to_bytes())
    sampled = [v for v, m in zip(traj.weight_versions, traj.loss_mask) if m]
    switch = sampled.index("step-1")
    assert 0 < switch < len(sampled) and sampled == ["step-0"] * switch + ["step-1"] * (len(sampled) - switch)
    assert traj.info["weight_version_sources"] == {"step-0": "server", "step-1": "server"}
    record = build_record({"metadata": {"name": "r", "namespace": "ns"}, "status": {"phase": "Succeeded"}}, traj)
    assert [v for v, m in zip(record.weight_versions.tolist(), record.loss_mask.tolist()) if m] == sampled
    await model.client.aclose()


async def test_a_spec_context_above_the_servers_is_lowered_and_said(fake_sglang: FakeSGLang) -> None:
    from agent_runner.pod.kinds import TokenRun

    fake_sglang.server_info = {"context_length": 4096, "max_req_input_len": 4090, "enable_return_routed_experts": False}
    model = _model(fake_sglang.url, max_context_tokens=65536, return_routed_experts=True)
    notice = await TokenRun(model, model.client).apply_server_limits()
    assert model.max_context_tokens == 4096 and model.server_limits == ContextLimits(
        context_length=4096, max_req_len=4095
    )
    assert "maxContextTokens 65536 exceeds the server's context length 4096; using 4096" in notice
    assert "--enable-return-routed-experts" in notice
    assert len(model.state.notes) == 2 and "; ".join(model.state.notes) == notice  # also in info.notes
    await model.client.aclose()


async def test_the_context_edge_against_the_stand_in_is_a_context_error(oracle_server: Callable[..., Any]) -> None:
    """SGLang's margin, as the stand-in enforces it: with the limits read from the server
    the runner stops before sending; without them, the server's 400 means the same."""
    probe = _model("http://127.0.0.1:9")  # only to measure the prompt
    probe.add_messages(PROMPT)
    probe._prepare_request()  # noqa: SLF001
    prompt = len(probe.buffer)
    await probe.client.aclose()
    server = oracle_server(context_length=prompt + 12)
    model = _model(server.url, max_context_tokens=100_000)
    model.server_limits = await model.client.limits()
    assert model.server_limits is not None and model.server_limits.context_length == prompt + 12
    model.add_messages(PROMPT)
    turn = await model.generate()
    assert turn.finish_reason == FinishReason.LENGTH and turn.new_tokens == 10  # max_req_len - prompt - 1
    model.add_messages([{"role": "user", "content": "go on"}])
    with pytest.raises(ContextBudgetError, match="the server admits prompts below"):
        await model.generate()
    blind = _model(server.url, max_context_tokens=100_000)  # never read the limits: asks for 512 new tokens
    blind.add_messages(PROMPT)
    with pytest.raises(ContextBudgetError, match="exceeds the model's maximum context length"):
        await blind.generate()
    assert blind.buffer.sampled_tokens == 0
    await model.client.aclose()
    await blind.client.aclose()
