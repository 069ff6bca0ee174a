"""The runner's compiled tokenizer against transformers, on every bundled chat template.

The runner tokenizes and renders with ``RunnerTokenizer`` (swerollout/runner_tokenizer.py,
no transformers import); transformers' own tokenizer is the reference. Per bundled
tokenizer with a chat template (one of each set of byte-identical tokenizer files), over
tool, multi-turn, reasoning and generation-prompt conversations, with and without tools:
the same renderings (or the same refusal), the same ids for them, the same decoding, the
same special and added tokens, and the runner's ChatTemplate built on either gives the
same prompt and delta tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_runner.policy.chat_template import ChatTemplate
from agent_runner.policy.errors import ChatTemplateError
from swerollout.runner_tokenizer import RunnerTokenizer, compile_tokenizer, load_runner_tokenizer
from swerollout.tokenizers import _bundled_sources, load_tokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the repository.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]


def _call(i: int, cmd: str, as_text: bool) -> dict[str, Any]:
    args: Any = json.dumps({"command": cmd}) if as_text else {"command": cmd}
    return {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": args}}


def _conversation(as_text: bool) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix the bug in utils.py <|im_end|> é 中文"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [_call(0, "ls", as_text)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "utils.py\nREADME"},
        {
            "role": "assistant",
            "content": "<think>\nTwo at once.\n</think>\n\nBoth.",
            "tool_calls": [_call(1, "cat utils.py", as_text), _call(2, "git status", as_text)],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "def f():\n    pass\n"},
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
        {"role": "assistant", "content": "Plain text reply.", "reasoning_content": "thought", "tool_calls": None},
        {"role": "user", "content": "Please use a tool."},
        {"role": "assistant", "content": "Done.", "tool_calls": [_call(3, "submit", as_text)]},
        {"role": "tool", "tool_call_id": "call_3", "content": "ok"},
    ]


def _as_parts(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversation with content as parts (templates that read content[i].text),
    and an image part in the first user turn (vision templates)."""
    out = [{**m, "content": [{"type": "text", "text": m["content"]}]} if m["content"] else m for m in messages]
    out[1] = {**out[1], "content": [*out[1]["content"], {"type": "image"}]}
    return out


CONVERSATIONS = {
    "arguments as objects": _conversation(False),
    "arguments as JSON text": _conversation(True),
    "content parts": _as_parts(_conversation(False)),
}


def _template_of(source: Path) -> str | None:
    if (source / "chat_template.jinja").is_file():
        return (source / "chat_template.jinja").read_text(encoding="utf-8")
    template = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template")
    return json.dumps(template) if template else None


def _templated() -> list[str]:
    """One bundled name per set of byte-identical tokenizer files and template."""
    seen: dict[str, str] = {}
    for name, source in sorted(_bundled_sources().items()):
        template = _template_of(source)
        if template is None:
            continue
        digest = hashlib.sha256(template.encode())
        for path in sorted(source.iterdir()):
            digest.update(path.name.encode() + path.read_bytes())
        seen.setdefault(digest.hexdigest(), name)
    return sorted(seen.values())


TEMPLATED = _templated()


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - the refusal itself is compared (both must refuse)
        return ("error", type(exc).__name__ if not isinstance(exc, ChatTemplateError) else str(exc))


def test_the_bundled_templated_tokenizers_are_all_here() -> None:
    assert len(TEMPLATED) >= 25 and {"qwen-2.5", "qwen-3", "qwen3-tc", "glm-4", "deepseek-v3"} <= set(TEMPLATED)


@pytest.mark.parametrize("name", TEMPLATED)
def test_compiled_tokenizer_renders_and_tokenizes_as_transformers(name: str, tmp_path: Path) -> None:
    reference = load_tokenizer(name)
    path = compile_tokenizer(name, tmp_path)
    assert path is not None, f"{name} was not compiled"
    light = RunnerTokenizer.from_file(path)

    assert light.chat_template == reference.chat_template
    assert light.special_tokens_map == reference.special_tokens_map
    assert light.all_special_ids == reference.all_special_ids
    assert light.unk_token_id == reference.unk_token_id
    assert {i: (t.content, t.special) for i, t in light.added_tokens_decoder.items()} == {
        i: (t.content, t.special) for i, t in reference.added_tokens_decoder.items()
    }

    rendered = 0
    for label, messages in CONVERSATIONS.items():
        for end in range(2, len(messages) + 1):
            for tools in (TOOLS, None):
                for prompt in (True, False):
                    kwargs = {"tools": tools, "tokenize": False, "add_generation_prompt": prompt}
                    kwargs |= {"enable_thinking": False} if end % 2 else {}
                    want = _outcome(reference.apply_chat_template, messages[:end], **kwargs)
                    got = _outcome(light.apply_chat_template, messages[:end], **kwargs)
                    assert got == want, f"{name}: {label}, {end} messages, tools={tools is not None}, prompt={prompt}"
                    if want[0] != "ok":
                        continue
                    rendered += 1
                    text = want[1]
                    ids = reference.encode(text, add_special_tokens=False)
                    assert light.encode(text) == ids
                    assert light.decode(ids) == reference.decode(ids, skip_special_tokens=False)
                    assert light.decode(ids, skip_special_tokens=True) == reference.decode(
                        ids, skip_special_tokens=True
                    )
                    tokens = reference.convert_ids_to_tokens(ids)
                    assert light.convert_ids_to_tokens(ids) == tokens
                    assert light.convert_tokens_to_string(tokens) == reference.convert_tokens_to_string(tokens)
    assert rendered > 0, f"{name}: the template rendered none of the conversations"

    # The runner's own view: the same structure/content pieces, prompt and delta tokens.
    for tools_or_none in (TOOLS, None):
        built = [_outcome(ChatTemplate, t, tools=tools_or_none, nonce="SWRXFIXEDQ") for t in (reference, light)]
        assert [kind for kind, _ in built] == [built[0][0]] * 2, name
        if built[0][0] != "ok":
            continue
        ref_t, light_t = built[0][1], built[1][1]
        messages = _conversation(ref_t._args_as_text)
        for end in (2, len(messages)):  # the runner's first prompt; a whole conversation
            want = _outcome(ref_t.prompt_ids, messages[:end])
            assert _outcome(light_t.prompt_ids, messages[:end]) == want, f"{name}: prompt of {end}"
        last = next(i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "assistant")
        history, new = messages[: last + 1], messages[last + 1 :]
        stop = ref_t.encode(reference.eos_token)[-1:] if reference.eos_token else []
        for sampled in (stop[0] if stop else None, None):
            want = _outcome(ref_t.delta_ids, history, new, sampled)
            assert _outcome(light_t.delta_ids, history, new, sampled) == want, f"{name}: delta"


def test_the_runner_loads_a_compiled_tokenizer_without_transformers(tmp_path: Path) -> None:
    env = {**os.environ, "SWEROLLOUT_COMPILED_TOKENIZERS": str(tmp_path)}
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from swerollout.runner_tokenizer import load_runner_tokenizer\n"
        "tok = load_runner_tokenizer('qwen-2.5')\n"
        "print(type(tok).__name__, 'transformers' in sys.modules)\n"
    )
    first = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert first.stdout.split() == ["RunnerTokenizer", "True"], "the first load compiles, with transformers"
    assert [p.name.startswith("qwen-2.5-") for p in tmp_path.iterdir()] == [True]
    assert all(p.stat().st_mode & 0o444 == 0o444 for p in tmp_path.iterdir()), "readable by the runner's user"
    again = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert again.stdout.split() == ["RunnerTokenizer", "False"], "a compiled tokenizer needs no transformers"


def test_a_tokenizer_that_cannot_be_compiled_loads_with_transformers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # transformers decodes this one with clean-up of spaces, which the runner's decode does not do.
    source = Path(str(load_tokenizer("qwen-2.5").name_or_path))
    directory = tmp_path / "tok"
    directory.mkdir()
    (directory / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    config = json.loads((source / "tokenizer_config.json").read_text())
    (directory / "tokenizer_config.json").write_text(json.dumps({**config, "clean_up_tokenization_spaces": True}))
    monkeypatch.setenv("SWEROLLOUT_COMPILED_TOKENIZERS", str(tmp_path / "compiled"))
    load_runner_tokenizer.cache_clear()
    tokenizer = load_runner_tokenizer(str(directory))
    assert not isinstance(tokenizer, RunnerTokenizer)
    assert tokenizer.clean_up_tokenization_spaces is True
    assert not (tmp_path / "compiled").exists() or not list((tmp_path / "compiled").iterdir())
