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

from swerollout.issue_images import TEMPLATE_IMAGE_PART
from swerollout_dev.policy_server.chat_format import new_tool_call_id
from swerollout_dev.policy_server.engine import Engine
from swerollout_dev.policy_server.errors import BadRequestError
from swerollout_dev.policy_server.tool_markup import parse_tool_calls
from swerollout_dev.policy_server.wire import (
    ChatCompletionRequest,
    GenerateRequest,
    SamplingParams,
)


def _image_url(part: Any) -> str | None:
    """The URL of an OpenAI ``image_url`` content part (``{"url": ...}`` or a bare string)."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return None
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, dict) else ref
    return url if isinstance(url, str) else ""


def message_images(messages: list[dict[str, Any]]) -> list[str]:
    """The image URLs of the messages' content parts, in order (SGLang's image_data)."""
    return [
        url
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if (url := _image_url(part)) is not None
    ]


def template_messages(messages: list[dict[str, Any]], *, show_images: bool = True) -> list[dict[str, Any]]:
    """OpenAI messages in the shape chat templates expect (arguments as objects, text content;
    content with images stays parts, each image an ``{"type": "image"}`` the template renders,
    unless the model takes no images: then only the text is kept, as its template reads no parts)."""
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        converted = dict(message)
        content = converted.get("content")
        if show_images and isinstance(content, list) and any(_image_url(part) is not None for part in content):
            converted["content"] = [
                dict(TEMPLATE_IMAGE_PART) if _image_url(part) is not None else part
                for part in content
                if isinstance(part, dict)
            ]
        elif isinstance(content, list):
            converted["content"] = "".join(part.get("text", "") for part in content if isinstance(part, dict))
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
        template_messages(request.messages, show_images=engine.image_pad_id is not None),
        tools=tools,
        add_generation_prompt=True,
        tokenize=False,
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
    images: list[str | dict[str, Any] | None] = list(message_images(request.messages))
    result = await engine.generate(
        GenerateRequest(rid=request.rid, input_ids=prompt_ids, sampling_params=sampling, image_data=images or None),
        route="chat",
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
