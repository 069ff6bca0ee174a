"""The images of a multimodal /generate, handled as SGLang 0.5.23's multimodal processor does.

SGLang keeps the caller's ``input_ids`` and expands the i-th image placeholder (pad)
token into the i-th image's tokens (``BaseMultimodalProcessor._expand_input_ids``,
with ``SGLANG_MM_AVOID_RETOKENIZE`` on by default): a prompt must hold exactly one pad
token per image, and ``meta_info.prompt_tokens`` counts the expanded prompt. A model
without a multimodal processor ignores ``image_data``.

The stand-in has no vision tower. An image's token count follows the 28-pixel tiles of
Qwen2-VL / GLM-4V (one token per 28 x 28 tile, at least 4), read from the PNG, GIF,
JPEG or WebP header of a data URL. It never downloads: an http(s) image counts
UNFETCHED_IMAGE_TOKENS tokens, and its URL is recorded as it came.
"""

from __future__ import annotations

import hashlib
import math
import struct

from pydantic import BaseModel, ConfigDict

from swerollout.issue_images import IssueImageError, data_url_payload
from swerollout_dev.policy_server.errors import BadRequestError

TILE_PIXELS = 28
MIN_IMAGE_TOKENS = 4
MAX_IMAGE_TOKENS = 16384
"""Bounds what a hostile header can claim (SGLang's processors cap pixels likewise)."""
UNFETCHED_IMAGE_TOKENS = 64


class ImageRecord(BaseModel):
    """One image of a request, as the stand-in received it (GET /_standin/requests)."""

    model_config = ConfigDict(extra="forbid")

    url: str | None = None
    """An http(s) image's URL (not downloaded); None for data URLs."""
    media_type: str | None = None
    bytes: int | None = None
    sha256: str | None = None
    """Of the decoded bytes of a data URL."""
    tokens: int
    """Tokens its placeholder expanded into (0: the model takes no images and ignored it)."""


def read_image(index: int, url: str) -> ImageRecord:
    if url.startswith(("http://", "https://")):
        return ImageRecord(url=url, tokens=UNFETCHED_IMAGE_TOKENS)
    try:
        media_type, payload = data_url_payload(url)
    except IssueImageError as exc:
        raise BadRequestError(f"image_data[{index}]: {exc}", field="image_data") from None
    size = image_size(payload)
    tokens = UNFETCHED_IMAGE_TOKENS
    if size is not None:
        width, height = size
        tokens = math.ceil(width / TILE_PIXELS) * math.ceil(height / TILE_PIXELS)
    return ImageRecord(
        media_type=media_type,
        bytes=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        tokens=min(max(tokens, MIN_IMAGE_TOKENS), MAX_IMAGE_TOKENS),
    )


def expand(input_ids: list[int], pad_id: int, images: list[ImageRecord]) -> list[int]:
    """The prompt as the model reads it: the i-th pad token becomes images[i].tokens pads."""
    found = input_ids.count(pad_id)
    if found != len(images):
        # SGLang's own words (BaseMultimodalProcessor._expand_input_ids).
        raise BadRequestError(
            f"prompt has {found} image placeholder token(s) but {len(images)} image(s) were provided",
            field="image_data",
        )
    out: list[int] = []
    next_image = 0
    for token in input_ids:
        if token == pad_id:
            out.extend([pad_id] * images[next_image].tokens)
            next_image += 1
        else:
            out.append(token)
    return out


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) from a PNG, GIF, JPEG or WebP header; None for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and data[12:16] == b"VP8X" and len(data) >= 30:
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        length = int.from_bytes(data[at + 2 : at + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # start of frame
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return width, height
        at += 2 + length
    return None
