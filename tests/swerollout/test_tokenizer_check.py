"""The ordinary-text check on real bundled tokenizers, by name as the client runs it."""

from __future__ import annotations

from pathlib import Path

from swerollout.tokenizer_check import ORDINARY_TEXT, describe, ordinary_text_problem
from swerollout.tokenizers import resolve_tokenizer_dir


def test_a_byte_level_tokenizer_passes_and_a_directory_copy_is_checked_like_its_name(tmp_path: Path) -> None:
    assert ordinary_text_problem("qwen-2.5") is None
    copy = tmp_path / "jiutian-copy"
    copy.mkdir()
    source = resolve_tokenizer_dir("jiutian-139moe-chat")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (copy / name).write_bytes((source / name).read_bytes())
    problem = ordinary_text_problem(str(copy))
    assert problem is not None and problem.startswith(f"spec.inference.tokenizer {str(copy)!r} cannot encode")
    assert "'\\n' (newline, U+000A)" in problem and "byte fallback" in problem


def test_what_cannot_be_told_here_is_left_to_the_runner() -> None:
    assert ordinary_text_problem("/no/such/tokenizer/dir") is None


def test_the_probe_covers_ascii_text_and_names_each_character() -> None:
    assert {"\n", "\t", " ", "a", "Z", "0", "~"} <= set(ORDINARY_TEXT) and len(ORDINARY_TEXT) == 97
    assert describe("\n") == "'\\n' (newline, U+000A)"
    assert describe("{") == "'{' (left curly bracket, U+007B)"
