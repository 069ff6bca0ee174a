"""OpenAI-compatible /v1/chat/completions on top of the token engine (non-streaming).

Messages are rendered with the tokenizer's own chat template (tools included),
the engine generates, and Hermes tool calls in the reply become the response's
``tool_calls``. The validation ChatAgent uses this; trainers use /generate.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from swerollout.dev.policy_server.chat_format import new_tool_call_id
from swerollout.dev.policy_server.engine import Engine
from swerollout.dev.policy_server.errors import BadRequestError
from swerollout.dev.policy_server.tool_markup import parse_tool_calls
from swerollout.dev.policy_server.wire import (
    ChatCompletionRequest,
    GenerateRequest,
    SamplingParams,
)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages in the shape chat templates expect (arguments as objects, text content)."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        converted = dict(message)
        content = converted.get("content")
        if isinstance(content, list):
            converted["content"] = "".join(
                part.get("text", "") for part in content if isinstance(part, dict)
            )
        elif content is None:
            converted["content"] = ""
        if converted.get("role") == "developer":
            converted["role"] = "system"
        calls = []
        for call in converted.get("tool_calls") or []:
            function = dict(call.get("function", {}))
            arguments = function.get("arguments", {})
            if isinstance(arguments, str):
                try:
                    function["arguments"] = json.loads(arguments) if arguments.strip() else {}
                except ValueError as exc:
                    raise BadRequestError(
                        f"messages[{index}].tool_calls: arguments is not valid JSON: {exc}",
                        field=f"messages[{index}].tool_calls",
                    ) from exc
            calls.append({**call, "function": function})
        if calls:
            converted["tool_calls"] = calls
        out.append(converted)
    return out


async def chat_completion(
    engine: Engine, request: ChatCompletionRequest, *, model_name: str, default_max_tokens: int
) -> dict[str, Any]:
    tools: list[dict[Any, Any] | Callable[..., Any]] | None = (
        [t.model_dump(mode="json") for t in request.tools] if request.tools else None
    )
    rendered = engine.tokenizer.apply_chat_template(
        template_messages(request.messages), tools=tools, add_generation_prompt=True, tokenize=False
    )
    prompt_ids = list(engine.tokenizer.encode(str(rendered), add_special_tokens=False))
    remaining = engine.context_length - len(prompt_ids)
    requested = request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    max_new = requested if requested is not None else max(min(default_max_tokens, remaining), 0)
    sampling = SamplingParams(
        max_new_tokens=max_new,
        temperature=1.0 if request.temperature is None else request.temperature,
        top_p=1.0 if request.top_p is None else request.top_p,
        top_k=-1 if request.top_k is None else request.top_k,
        stop=request.stop,
        sampling_seed=request.seed,
    )
    result = await engine.generate(
        GenerateRequest(rid=request.rid, input_ids=prompt_ids, sampling_params=sampling)
    )
    markup = engine.chat_format.markup
    content, calls = parse_tool_calls(result.text, markup) if tools and markup else (result.text, [])
    finish = result.meta_info.finish_reason
    finish_type = finish.type if finish else "stop"
    finish_reason = "tool_calls" if calls and finish_type == "stop" else finish_type
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": new_tool_call_id(),
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
            }
            for c in calls
        ]
    usage = {
        "prompt_tokens": result.meta_info.prompt_tokens,
        "completion_tokens": result.meta_info.completion_tokens,
        "total_tokens": result.meta_info.prompt_tokens + result.meta_info.completion_tokens,
    }
    return {
        "id": f"chatcmpl-{result.meta_info.id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model or model_name,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage,
        "metadata": {"weight_version": result.meta_info.weight_version},
    }
