"""Issue images in the runner's conversation: content parts in, image_data out.

Messages stay in OpenAI's shape: the first user message of an instance with images
(``spec.agent.issueImageMode: Inline``) is a list of content parts, the images first
(``{"type": "image_url", "image_url": {"url": ...}}``, in the issue's order), then the
rendered instance template as one text part. The ChatAgent sends exactly that; the
token path hands chat templates ``{"type": "image"}`` parts (they render the image
placeholder, e.g. GLM-4.5V's ``<|begin_of_image|><|image|><|end_of_image|>``, as
structure) and sends the URLs as /generate's ``image_data``, in the same order.

Text parts are content like any other string (content is text: docs/token-exactness.md);
the image placeholder is the template's structure. What SGLang does with it: its
multimodal processor keeps the runner's ``input_ids`` and expands the i-th placeholder
(pad) token into the i-th image's tokens, so the server's prompt is longer than the
runner's by the images' tokens (docs/sglang-protocol.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from swerollout.issue_images import TEMPLATE_IMAGE_PART, check_image_url

__all__ = ["image_urls", "map_text_parts", "template_content", "user_content"]


def user_content(text: str, urls: Sequence[str]) -> str | list[dict[str, Any]]:
    """The first user message's content: plain text, or the images then the text as parts."""
    if not urls:
        return text
    for url in urls:
        check_image_url(url)
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    parts.append({"type": "text", "text": text})
    return parts


def _image_url(part: Mapping[str, Any]) -> str | None:
    if part.get("type") != "image_url":
        return None
    ref = part.get("image_url")
    url = ref.get("url") if isinstance(ref, Mapping) else ref
    return url if isinstance(url, str) else None


def image_urls(messages: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every image of the conversation, in the order the template renders their placeholders."""
    urls: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            urls.extend(url for part in content if isinstance(part, Mapping) and (url := _image_url(part)) is not None)
    return urls


def template_content(content: Any) -> Any:
    """Content as chat templates read it: image parts become ``{"type": "image"}``."""
    if not isinstance(content, list):
        return content
    return [
        dict(TEMPLATE_IMAGE_PART) if isinstance(part, Mapping) and _image_url(part) is not None else part
        for part in content
    ]


def map_text_parts(content: list[Any], fn: Callable[[str], str]) -> list[Any]:
    """Content parts with every non-empty text part's text replaced by ``fn(text)`` (markers,
    stubs); image parts are structure and stay as they are."""
    out: list[Any] = []
    for part in content:
        if (
            isinstance(part, Mapping)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            and part["text"]
        ):
            out.append({**part, "text": fn(part["text"])})
        else:
            out.append(part)
    return out
