"""String helpers used when printing tables and status lines."""

import re
import unicodedata

_NON_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text):
    """Lower-case ASCII slug: 'Hello, World!' -> 'hello-world'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return _NON_WORD.sub("-", ascii_text.lower()).strip("-")


def truncate(text, width, suffix="..."):
    """Shorten ``text`` to at most ``width`` characters, ending with ``suffix`` when cut.

    The result, suffix included, never exceeds ``width``.
    """
    if width < 0:
        raise ValueError("width must be >= 0, got %d" % width)
    if len(text) >= width:
        return text[:width] + suffix
    return text


def pad_center(text, width, fill=" "):
    """Center ``text`` in a field of ``width`` characters; extra fill goes to the right."""
    if len(fill) != 1:
        raise ValueError("fill must be a single character, got %r" % fill)
    missing = width - len(text)
    if missing <= 0:
        return text
    left = missing // 2
    return fill * left + text + fill * (missing - left)
