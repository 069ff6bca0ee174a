"""``data:`` image URLs as the API accepts them: the lowest rule of issue images, here so that
the API models check them without importing the template rules above (swerollout.issue_images)."""

from __future__ import annotations

import base64
import binascii
import re

__all__ = ["MEDIA_TYPES", "IssueImageError", "data_url_payload"]

MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
"""The ``data:`` media types sent on (what SGLang's PIL decoding reads without plugins)."""

_DATA_URL = re.compile(r"data:([a-z0-9.+/-]+);base64,", re.IGNORECASE)


class IssueImageError(ValueError):
    """An issue image that cannot be sent, or a template that cannot show it."""


def data_url_payload(url: str) -> tuple[str, bytes]:
    """The media type and the decoded bytes of a ``data:`` image URL; IssueImageError otherwise."""
    match = _DATA_URL.match(url)
    if match is None:
        raise IssueImageError("a data URL must look like data:image/png;base64,<base64 data>")
    media_type = match.group(1).lower()
    if media_type not in MEDIA_TYPES:
        raise IssueImageError(f"data URL of type {media_type}; send one of {', '.join(MEDIA_TYPES)}")
    try:
        payload = base64.b64decode(url[match.end() :], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise IssueImageError(f"the data URL's base64 does not decode: {exc}") from None
    if not payload:
        raise IssueImageError("the data URL holds no bytes")
    return media_type, payload
