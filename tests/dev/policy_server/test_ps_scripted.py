"""oracle and null policies over real HTTP: /generate token-in/token-out and chat completions."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import httpx

from tests.support.ps_support import GOLD_PATCH, GREETING_V2, TOOLS, render

SYSTEM = {"role": "system", "content": "You are a software engineer fixing a repository."}
TASK = {
    "role": "user",
    "content": "Task acme__greet-12: greet() forgets the comma and the exclamation mark.\nExpected 'Hello, Bob!'.",
}
TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.S)
BASH_BLOCK = re.compile(r"```bash\n(.*?)\n```", re.S)


async def generate(url: str, input_ids: list[int], **extra: Any) -> dict[str, Any]:
    body = {"input_ids": input_ids, "sampling_params": {"max_new_tokens": 4096}, "return_logprob": True, **extra}
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(url + "/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def only_tool_call(text: str) -> dict[str, Any]:
    calls = TOOL_CALL.findall(text)
    assert len(calls) == 1, text
    parsed: dict[str, Any] = json.loads(calls[0])
    return parsed


def run_bash(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=30)


async def test_oracle_tool_call_applies_gold_patch_then_submits(policy_server, tokenizer, greet_repo) -> None:
    server = policy_server("oracle")
    prompt = render(tokenizer, [SYSTEM, TASK], tools=TOOLS)
    first = await generate(server.url, prompt)

    out = first["output_ids"]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert out[-1] == im_end, "the reply must end with the template's end-of-turn token"
    assert first["meta_info"]["finish_reason"] == {"type": "stop", "matched": im_end}
    assert [entry[1] for entry in first["meta_info"]["output_token_logprobs"]] == out
    assert {entry[0] for entry in first["meta_info"]["output_token_logprobs"]} == {0.0}
    call = only_tool_call(tokenizer.decode(out, skip_special_tokens=False))
    assert call["name"] == "bash"
    assert GOLD_PATCH in call["arguments"]["command"]

    # The command really fixes the repository and leaves no stray file in it.
    result = run_bash(call["arguments"]["command"], greet_repo)
    assert result.returncode == 0, result.stderr
    assert (greet_repo / "greet.py").read_text() == GREETING_V2
    status = subprocess.run(["git", "status", "--porcelain"], cwd=greet_repo, capture_output=True, text=True)
    assert status.stdout.strip() == "M greet.py"

    # Turn 2: the tool result is appended; the oracle now submits.
    delta = tokenizer.encode(
        "\n<|im_start|>user\n<tool_response>\n\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
        add_special_tokens=False,
    )
    second = await generate(server.url, prompt + out + delta)
    call = only_tool_call(second["text"])
    assert call == {"name": "submit", "arguments": {}}


async def test_oracle_text_format_uses_one_bash_block(policy_server, tokenizer, greet_repo) -> None:
    server = policy_server("oracle")
    prompt = render(tokenizer, [SYSTEM, TASK])  # no tools offered
    first = await generate(server.url, prompt)
    blocks = BASH_BLOCK.findall(first["text"])
    assert len(blocks) == 1 and "<tool_call>" not in first["text"]
    assert run_bash(blocks[0], greet_repo).returncode == 0
    assert (greet_repo / "greet.py").read_text() == GREETING_V2

    history = [
        SYSTEM,
        TASK,
        {"role": "assistant", "content": first["text"]},
        {"role": "user", "content": "(no output)"},
    ]
    second = await generate(server.url, render(tokenizer, history))
    assert BASH_BLOCK.findall(second["text"]) == ["submit"]


async def test_oracle_picks_longest_instance_id_and_reports_unknown_tasks(policy_server, tokenizer) -> None:
    server = policy_server("oracle")
    # "acme__greet-12" contains "acme__greet-1": the longer id must win.
    reply = await generate(server.url, render(tokenizer, [TASK], tools=TOOLS))
    assert "Hello, " in only_tool_call(reply["text"])["arguments"]["command"]

    unknown = {"role": "user", "content": "Please refactor the billing module."}
    reply = await generate(server.url, render(tokenizer, [unknown], tools=TOOLS))
    assert "<tool_call>" not in reply["text"] and "do not recognise" in reply["text"]
    assert reply["meta_info"]["finish_reason"]["type"] == "stop"


async def test_oracle_recognises_problem_statement_without_id(policy_server, tokenizer) -> None:
    server = policy_server("oracle")
    statement = {
        "role": "user",
        "content": "Issue:\ngreet() forgets the comma and the exclamation mark.\n\nExpected 'Hello, Bob!'.",
    }
    reply = await generate(server.url, render(tokenizer, [statement], tools=TOOLS))
    assert GOLD_PATCH in only_tool_call(reply["text"])["arguments"]["command"]


async def test_null_submits_in_both_formats(policy_server, tokenizer) -> None:
    server = policy_server("null")
    reply = await generate(server.url, render(tokenizer, [SYSTEM, TASK], tools=TOOLS))
    assert only_tool_call(reply["text"]) == {"name": "submit", "arguments": {}}
    reply = await generate(server.url, render(tokenizer, [SYSTEM, TASK]))
    assert BASH_BLOCK.findall(reply["text"]) == ["submit"]


async def test_scripted_reply_is_cut_by_max_new_tokens(policy_server, tokenizer) -> None:
    server = policy_server("oracle")
    body = {"input_ids": render(tokenizer, [TASK], tools=TOOLS), "sampling_params": {"max_new_tokens": 5}}
    async with httpx.AsyncClient(timeout=60) as client:
        reply = (await client.post(server.url + "/generate", json=body)).json()
    assert len(reply["output_ids"]) == 5
    assert reply["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert "output_token_logprobs" not in reply["meta_info"]  # return_logprob was not set


async def chat(url: str, **body: Any) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=60) as client:
        response = await client.post(url + "/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_chat_completions_oracle_tool_calls(policy_server, greet_repo) -> None:
    server = policy_server("oracle")
    messages: list[dict[str, Any]] = [SYSTEM, TASK]
    first = await chat(server.url, model="anything", messages=messages, tools=TOOLS)
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    arguments = json.loads(call["function"]["arguments"])
    assert run_bash(arguments["command"], greet_repo).returncode == 0
    assert (greet_repo / "greet.py").read_text() == GREETING_V2
    assert first["usage"]["total_tokens"] == first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]

    messages = [
        *messages,
        {"role": "assistant", "content": choice["message"]["content"], "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": ""},
    ]
    second = await chat(server.url, messages=messages, tools=TOOLS)
    (call,) = second["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "submit"
    assert json.loads(call["function"]["arguments"]) == {}


async def test_chat_completions_null_and_text_format(policy_server) -> None:
    server = policy_server("null")
    reply = await chat(server.url, messages=[TASK], tools=TOOLS)
    (call,) = reply["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "submit"
    reply = await chat(server.url, messages=[TASK])
    message = reply["choices"][0]["message"]
    assert "tool_calls" not in message and BASH_BLOCK.findall(message["content"]) == ["submit"]
    assert reply["choices"][0]["finish_reason"] == "stop"


async def test_oracle_speaks_the_template_family_markup(policy_server, greet_repo) -> None:
    """GLM templates get GLM tool calls, ended by the token GLM puts after a call."""
    from swerollout.tokenizers import load_tokenizer
    from swerollout_dev.policy_server.tool_markup import GLMMarkup, parse_tool_calls

    glm = load_tokenizer("glm-4.5v")
    server = policy_server("oracle", tokenizer="glm-4.5v")
    reply = await generate(server.url, render(glm, [SYSTEM, TASK], tools=TOOLS))
    assert glm.convert_ids_to_tokens(reply["output_ids"][-1]) == "<|observation|>"
    _, calls = parse_tool_calls(reply["text"], GLMMarkup())
    assert [c.name for c in calls] == ["bash"]
    assert run_bash(calls[0].arguments["command"], greet_repo).returncode == 0
    assert (greet_repo / "greet.py").read_text() == GREETING_V2


async def test_oracle_falls_back_to_text_format_without_tool_markup(policy_server) -> None:
    from swerollout.tokenizers import load_tokenizer

    deepseek = load_tokenizer("deepseek-v3")
    server = policy_server("oracle", tokenizer="deepseek-v3")
    reply = await generate(server.url, render(deepseek, [SYSTEM, TASK], tools=TOOLS))
    (command,) = BASH_BLOCK.findall(reply["text"])
    assert GOLD_PATCH in command


async def test_oracle_ledger_turns_come_before_the_fix(policy_server, tokenizer, greet_repo) -> None:
    """--oracle-ledger N: turns 0..N-1 each append their step to the ledger file, then the
    fix, then submit; running the commands once each leaves one line per step in the diff."""
    from swerollout_dev.policy_server.policies.scripted import LEDGER_FILE

    server = policy_server("oracle", oracle_ledger=2)
    history = [SYSTEM, TASK]
    commands = []
    for _ in range(4):
        reply = await generate(server.url, render(tokenizer, history))
        [command] = BASH_BLOCK.findall(reply["text"])
        commands.append(command)
        if command != "submit":
            assert run_bash(command, greet_repo).returncode == 0
        history += [{"role": "assistant", "content": reply["text"]}, {"role": "user", "content": "(no output)"}]
    assert commands[0].endswith(f">> {LEDGER_FILE}") and "step 0" in commands[0] and "step 1" in commands[1]
    assert GOLD_PATCH in commands[2] and commands[3] == "submit"
    assert (greet_repo / LEDGER_FILE).read_text() == "step 0\nstep 1\n"
    assert (greet_repo / "greet.py").read_text() == GREETING_V2
