"""One rule for issue images: which chat templates show them, what a data URL may be, the Links text."""

from __future__ import annotations

import pytest

from swerollout.issue_images import (
    VISION_TOKENIZER_EXAMPLES,
    IssueImageError,
    check_image_url,
    image_placeholder,
    links_text,
    shows_images,
)
from swerollout.tokenizers import load_tokenizer
from tests.support.image_bytes import data_url, png


@pytest.mark.parametrize(
    ("name", "pad"),
    [
        ("glm-4.5v", "<|image|>"),
        ("qwen2.5-vl-3b-instruct-awq", "<|image_pad|>"),
        ("qwen-3.5", "<|image_pad|>"),
        ("minimax-m3", "]<]image[>["),
    ],
)
def test_vision_templates_render_their_placeholder_as_added_tokens(name: str, pad: str) -> None:
    tokenizer = load_tokenizer(name)
    placeholder = image_placeholder(tokenizer)
    assert placeholder is not None
    assert tokenizer.convert_ids_to_tokens(placeholder.pad_id) == pad
    assert list(placeholder.ids) == tokenizer.encode(placeholder.text, add_special_tokens=False)


@pytest.mark.parametrize("name", ["qwen-2.5", "glm-4", "qwen-3", "deepseek-v3"])
def test_text_only_templates_show_no_image(name: str) -> None:
    """qwen-2.5 and deepseek-v3 fail on content parts, glm-4 prints the part as text, qwen-3 drops it."""
    assert image_placeholder(load_tokenizer(name)) is None
    assert shows_images(name) is False


def test_the_examples_named_in_errors_show_images() -> None:
    assert all(shows_images(name) for name in VISION_TOKENIZER_EXAMPLES)
    assert shows_images("/no/such/tokenizer/dir") is None  # cannot tell here: the runner checks


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("file:///etc/passwd", "an http(s) URL or a data:image/... URL"),
        ("/etc/passwd", "an http(s) URL or a data:image/... URL"),
        ("data:image/png,rawbytes", "must look like data:image/png;base64"),
        ("data:image/bmp;base64,Qk0=", "data URL of type image/bmp"),
        ("data:image/png;base64,", "holds no bytes"),
    ],
)
def test_what_may_not_reach_the_server(url: str, problem: str) -> None:
    with pytest.raises(IssueImageError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        check_image_url(url)


def test_links_text_lists_urls_and_describes_inline_data() -> None:
    shot = png(4, 4)
    text = links_text("Legend overlaps.\n", ["https://i.example/a.png", data_url(shot)])
    assert text == (
        "Legend overlaps.\n\nThe issue has 2 attached image(s), not shown here:\n"
        f"1. https://i.example/a.png\n2. an inline image/png image ({len(shot)} bytes)\n"
    )
