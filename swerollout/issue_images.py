"""Issue images (``spec.instance.issueImages``): the rules the client, the operator, the
runner and the SGLang stand-in share.

- Which chat templates can show an image, and with which tokens: a template shows
  images when it renders an image content part (``{"type": "image"}``) as a run of its
  own added tokens (GLM-4.5V: ``<|begin_of_image|><|image|><|end_of_image|>``, Qwen2-VL:
  ``<|vision_start|><|image_pad|><|vision_end|>``). The middle token of that run is the
  one an SGLang multimodal processor expands into the image's tokens (the *pad*). A
  template that prints the part as text (``{'type': 'image'}``) or fails on list content
  is text-only. Derived from the template; no model name is special.
- What a ``data:`` image may be: a base64 PNG, JPEG, GIF or WebP. Sizes and counts are
  bounded by the API (16 images, 256 KiB of characters each, 512 KiB of instance text).
- The explicit text fallback (``spec.agent.issueImageMode: Links``): the model sees no
  image; the problem statement lists the images as text.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# Re-exported: callers take every issue-image rule from here; the data-URL ones live below the API.
from swerollout.api.data_urls import MEDIA_TYPES as MEDIA_TYPES
from swerollout.api.data_urls import IssueImageError as IssueImageError
from swerollout.api.data_urls import data_url_payload as data_url_payload

if TYPE_CHECKING:
    from swerollout.api.v1alpha1 import SWERolloutSpec
    from swerollout.runner_tokenizer import AnyTokenizer

VISION_TOKENIZER_EXAMPLES = ("glm-4.5v", "qwen2.5-vl-3b-instruct-awq")
"""Bundled tokenizers whose templates show images, named in errors (a test keeps this true)."""
TEMPLATE_IMAGE_PART: dict[str, Any] = {"type": "image"}
"""An image as chat templates read it (they need no URL: the pixels travel in image_data)."""


def check_image_url(url: str) -> None:
    """Refuse what the inference server must never be handed: only http(s) URLs (fetched by
    the server) and decodable ``data:`` images pass; SGLang would also read ``file://`` and
    bare paths from its own disk."""
    if url.startswith(("http://", "https://")):
        return
    if url.startswith("data:"):
        data_url_payload(url)
        return
    raise IssueImageError("an issue image must be an http(s) URL or a data:image/... URL")


@dataclass(frozen=True)
class ImagePlaceholder:
    """What a chat template renders for one image content part."""

    text: str
    """The run of added tokens, e.g. ``<|begin_of_image|><|image|><|end_of_image|>``."""
    ids: tuple[int, ...]
    pad_id: int
    """The token the server's multimodal processor expands into the image's tokens."""


def image_placeholder(tokenizer: AnyTokenizer) -> ImagePlaceholder | None:
    """The template's rendering of an image part, or None when the template cannot show images."""
    # Cached on the tokenizer object as a one-item tuple (None is a valid answer).
    cached: tuple[ImagePlaceholder | None] | None = getattr(tokenizer, "_swerollout_image_placeholder", None)
    if cached is None:
        cached = (_probe_placeholder(tokenizer),)
        vars(tokenizer)["_swerollout_image_placeholder"] = cached
    return cached[0]


def _probe_placeholder(tokenizer: AnyTokenizer) -> ImagePlaceholder | None:
    if not getattr(tokenizer, "chat_template", None):
        return None
    before, after = (f"SWRXIMG{secrets.token_hex(6).upper()}{k}" for k in "AB")
    content = [{"type": "text", "text": before}, dict(TEMPLATE_IMAGE_PART), {"type": "text", "text": after}]
    messages: Any = [{"role": "user", "content": content}]
    try:
        rendered = str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    except Exception:  # noqa: BLE001 - a template that cannot render content parts shows no image
        return None
    start, end = rendered.find(before), rendered.find(after)
    if start < 0 or end < start:
        return None
    run = rendered[start + len(before) : end].strip()
    added = {str(tok.content): int(i) for i, tok in tokenizer.added_tokens_decoder.items()}
    ids: list[int] = []
    rest = run
    while rest:
        token = next((t for t in sorted(added, key=len, reverse=True) if rest.startswith(t)), None)
        if token is None:
            return None  # text, not structure: the template prints the part (e.g. "{'type': 'image'}")
        ids.append(added[token])
        rest = rest[len(token) :]
    if len(ids) % 2 == 0:
        return None  # no middle token: which one the server expands is not knowable from the template
    return ImagePlaceholder(text=run, ids=tuple(ids), pad_id=ids[len(ids) // 2])


def text_only_message(tokenizer_name: str, count: int) -> str:
    return (
        f"spec.inference.tokenizer {tokenizer_name!r}: its chat template cannot show images, and "
        f"spec.instance.issueImages holds {count}; use a tokenizer whose template does (e.g. "
        f"{', '.join(VISION_TOKENIZER_EXAMPLES)}), or set spec.agent.issueImageMode: Links to list the "
        "images as text"
    )


@functools.lru_cache(maxsize=64)
def shows_images(tokenizer_name: str) -> bool | None:
    """Whether a tokenizer's template shows images; None when it cannot be told here (the
    tokenizer packages are not installed, or the name is a directory only the runner has).
    Loads the tokenizer without keeping it: the answer is all that is cached."""
    try:
        from swerollout.tokenizers import TokenizerError, load_tokenizer

        tokenizer = load_tokenizer.__wrapped__(tokenizer_name)
    except (ImportError, TokenizerError, OSError, ValueError):
        return None
    return image_placeholder(tokenizer) is not None


def spec_problem(spec: SWERolloutSpec) -> str | None:
    """Why a rollout's issue images cannot reach its model, or None. Checked by the client at
    submit and by the operator (InvalidSpec); the runner checks again at setup, so a tokenizer
    directory neither of them can read still fails before any token is sent."""
    from swerollout.api.v1alpha1 import AgentKind, IssueImageMode

    count = len(spec.instance.issue_images)
    if not count or spec.agent.issue_image_mode != IssueImageMode.INLINE or spec.agent.kind == AgentKind.CHAT_AGENT:
        return None  # ChatAgent: the OpenAI-compatible server renders the images itself
    name = spec.inference.tokenizer
    if name and shows_images(name) is False:
        return text_only_message(name, count)
    return None


def links_text(problem_statement: str, urls: list[str]) -> str:
    """The problem statement with its images listed as text (issueImageMode Links): the model
    is told there are images it cannot see; inline data is described, not pasted."""
    lines = [problem_statement.rstrip("\n"), "", f"The issue has {len(urls)} attached image(s), not shown here:"]
    for number, url in enumerate(urls, start=1):
        if url.startswith("data:"):
            try:
                media_type, payload = data_url_payload(url)
                lines.append(f"{number}. an inline {media_type} image ({len(payload)} bytes)")
            except IssueImageError:
                lines.append(f"{number}. an inline image")
        else:
            lines.append(f"{number}. {url}")
    return "\n".join(lines) + "\n"
