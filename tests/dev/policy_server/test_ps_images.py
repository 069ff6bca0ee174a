"""The stand-in takes /generate's image_data as SGLang 0.5.23 does: one pad token per image in
input_ids, each expanded into the image's tokens, and records every image it received."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from swerollout.issue_images import image_placeholder
from swerollout.tokenizers import load_tokenizer
from swerollout_dev.policy_server import PolicyServerHandle
from tests.support.image_bytes import data_url, gif, jpeg_header, png

VISION = "glm-4.5v"


def prompt(tokenizer: Any, images: int) -> list[int]:
    """A GLM-4.5V prompt with ``images`` image placeholders, as its template renders them."""
    content = [*({"type": "image"} for _ in range(images)), {"type": "text", "text": "what is wrong here?"}]
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer.encode(text, add_special_tokens=False))


def generate(server: PolicyServerHandle, input_ids: list[int], image_data: Any) -> httpx.Response:
    body = {"input_ids": input_ids, "image_data": image_data, "sampling_params": {"max_new_tokens": 2}}
    return httpx.post(f"{server.url}/generate", json=body, timeout=120)


def last_request(server: PolicyServerHandle) -> dict[str, Any]:
    return httpx.get(f"{server.url}/_standin/requests").raise_for_status().json()["requests"][-1]


def test_images_expand_their_placeholders_in_order(policy_server: Callable[..., PolicyServerHandle]) -> None:
    server = policy_server("null", tokenizer=VISION)
    tokenizer = load_tokenizer(VISION)
    ids = prompt(tokenizer, 4)
    shot, animation = png(56, 84), gif(29, 1)
    images = [
        data_url(shot),
        "https://user-images.example/b.png",
        data_url(animation, "image/gif"),
        data_url(jpeg_header(280, 28), "image/jpeg"),
    ]
    response = generate(server, ids, images)
    assert response.status_code == 200, response.text
    # 2 x 3 tiles; not downloaded: 64; 2 x 1 tiles, at least 4; 10 x 1 tiles.
    assert response.json()["meta_info"]["prompt_tokens"] == len(ids) - 4 + 6 + 64 + 4 + 10
    record = last_request(server)
    assert record["route"] == "generate" and record["sent_tokens"] == len(ids)
    assert [(i["url"], i["sha256"], i["tokens"]) for i in record["images"]] == [
        (None, hashlib.sha256(shot).hexdigest(), 6),
        ("https://user-images.example/b.png", None, 64),
        (None, hashlib.sha256(animation).hexdigest(), 4),
        (None, hashlib.sha256(jpeg_header(280, 28)).hexdigest(), 10),
    ]


def test_sglangs_other_image_data_shapes_are_accepted(policy_server: Callable[..., PolicyServerHandle]) -> None:
    server = policy_server("null", tokenizer=VISION)
    ids = prompt(load_tokenizer(VISION), 1)
    assert generate(server, ids, "https://user-images.example/a.png").status_code == 200
    assert generate(server, ids, [{"url": "https://user-images.example/a.png", "detail": "auto"}]).status_code == 200
    assert [i["url"] for i in last_request(server)["images"]] == ["https://user-images.example/a.png"]


@pytest.mark.parametrize(
    ("placeholders", "image_data", "message"),
    [
        (
            1,
            ["https://a.example/1.png", "https://a.example/2.png"],
            "prompt has 1 image placeholder token(s) but 2 image(s) were provided",
        ),
        (2, ["https://a.example/1.png"], "prompt has 2 image placeholder token(s) but 1 image(s) were provided"),
        (1, ["data:image/png;base64,%%%"], "image_data[0]: the data URL's base64 does not decode"),
        (1, ["data:image/svg+xml;base64,PHN2Zz4="], "image_data[0]: data URL of type image/svg+xml"),
        (1, [7], "image_data.str: Input should be a valid string"),
        (1, [{"detail": "auto"}], "image_data[0]: an image is a URL string or an object with a url"),
    ],
)
def test_bad_images_are_refused_naming_the_field(
    policy_server: Callable[..., PolicyServerHandle], placeholders: int, image_data: Any, message: str
) -> None:
    server = policy_server("null", tokenizer=VISION)
    response = generate(server, prompt(load_tokenizer(VISION), placeholders), image_data)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]


def test_a_text_only_model_ignores_images_as_sglang_does(policy_server: Callable[..., PolicyServerHandle]) -> None:
    server = policy_server("null")
    tokenizer = load_tokenizer("qwen-2.5")
    assert image_placeholder(tokenizer) is None
    ids = list(tokenizer.encode("hello", add_special_tokens=False))
    response = generate(server, ids, ["https://user-images.example/a.png"])
    assert response.status_code == 200 and response.json()["meta_info"]["prompt_tokens"] == len(ids)
    assert last_request(server)["images"] == [
        {"url": "https://user-images.example/a.png", "media_type": None, "bytes": None, "sha256": None, "tokens": 0}
    ]
