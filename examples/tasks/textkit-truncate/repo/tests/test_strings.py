import pytest

from textkit import pad_center, slugify, truncate


def test_slugify_basic():
    assert slugify("Hello, World!") == "hello-world"


def test_slugify_accents():
    assert slugify("Crème brûlée") == "creme-brulee"


def test_truncate_short_text_unchanged():
    assert truncate("abc", 10) == "abc"


def test_truncate_negative_width():
    with pytest.raises(ValueError):
        truncate("abc", -1)


def test_pad_center_extra_fill_right():
    assert pad_center("ab", 5, "*") == "*ab**"


def test_pad_center_rejects_long_fill():
    with pytest.raises(ValueError):
        pad_center("ab", 5, "--")
