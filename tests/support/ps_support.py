"""Shared constants and helpers of the policy-server tests (a uniquely named module,
importable from the test files because pytest puts this directory on sys.path)."""

from __future__ import annotations

from typing import Any

TOKENIZER = "qwen-2.5"
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a bash command in the repository.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}
SUBMIT_TOOL = {
    "type": "function",
    "function": {
        "name": "submit",
        "description": "Submit the current changes.",
        "parameters": {"type": "object", "properties": {}},
    },
}
TOOLS = [BASH_TOOL, SUBMIT_TOOL]

GREETING_V1 = 'def greet(name):\n    return "Hello " + name\n'
GREETING_V2 = 'def greet(name):\n    return "Hello, " + name + "!"\n'
GOLD_PATCH = (
    "diff --git a/greet.py b/greet.py\n"
    "--- a/greet.py\n"
    "+++ b/greet.py\n"
    "@@ -1,2 +1,2 @@\n"
    " def greet(name):\n"
    '-    return "Hello " + name\n'
    '+    return "Hello, " + name + "!"\n'
)
INSTANCES = [
    {
        "instance_id": "acme__greet-12",
        "repo": "acme/greet",
        "base_commit": "0" * 40,
        "problem_statement": "greet() forgets the comma and the exclamation mark.\nExpected 'Hello, Bob!'.",
        "patch": GOLD_PATCH,
    },
    {
        # Its id is a prefix of the next one: the oracle must pick the longest match.
        "instance_id": "acme__greet-1",
        "repo": "acme/greet",
        "base_commit": "1" * 40,
        "problem_statement": "Something else entirely about parsing dates.",
        "patch": "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n",
    },
]


def render(tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
    """Chat-templated prompt ids with the generation prompt, as a token-in client sends them."""
    text = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return list(tokenizer.encode(text, add_special_tokens=False))
