"""Offline tokenizer loading: bundled names, directories, unknown names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from swerollout.tokenizers import (
    UnknownTokenizerError,
    bundled_tokenizers,
    load_tokenizer,
    resolve_tokenizer_dir,
)


def test_bundled_names_include_the_families_we_prove() -> None:
    names = bundled_tokenizers()
    for expected in ("qwen-2.5", "qwen-3", "glm-4", "deepseek-v3", "deepseek-v3.1", "qwen3-tc"):
        assert expected in names
    # Directories without a tokenizer.json(.zip) cannot load, so they are not offered.
    assert "qwen-3.6" not in names


def test_qwen_round_trip_and_special_tokens() -> None:
    tok = load_tokenizer("qwen-2.5")
    ids = tok.encode("def f(x):\n    return x<|im_end|>\n", add_special_tokens=False)
    assert tok.convert_tokens_to_ids("<|im_end|>") in ids
    assert tok.decode(ids) == "def f(x):\n    return x<|im_end|>\n"
    assert tok.chat_template


def test_cached_per_name() -> None:
    assert load_tokenizer("qwen-2.5") is load_tokenizer("qwen-2.5")


def test_extracted_into_cache_dir_and_directory_path_loads(tmp_path: Path) -> None:
    directory = resolve_tokenizer_dir("deepseek-v3")
    assert (directory / "tokenizer.json").is_file()
    copy = tmp_path / "my-tokenizer"
    shutil.copytree(directory, copy)
    by_path = load_tokenizer(str(copy))
    by_name = load_tokenizer("deepseek-v3")
    text = "SWE-bench: fix the bug in utils.py"
    assert by_path.encode(text) == by_name.encode(text)


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(UnknownTokenizerError) as info:
        load_tokenizer("no-such-model")
    assert "qwen-2.5" in str(info.value) and "no-such-model" in str(info.value)


def test_directory_missing_files_is_explained(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text("{}")
    with pytest.raises(UnknownTokenizerError, match="tokenizer.json"):
        load_tokenizer(str(tmp_path))


def test_parallel_processes_extract_safely(tmp_path: Path) -> None:
    # Four processes race to extract the same bundled tokenizer into an empty cache.
    import subprocess
    import sys

    code = "from swerollout.tokenizers import resolve_tokenizer_dir; print(resolve_tokenizer_dir('glm-4'))"
    env = {"SWEROLLOUT_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env) for _ in range(4)
    ]
    outputs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0]
    target = tmp_path / "tokenizers" / "glm-4"
    assert set(outputs) == {str(target)}
    assert sorted(p.name for p in (tmp_path / "tokenizers").iterdir()) == ["glm-4"]  # no staging dirs left
    reference = resolve_tokenizer_dir("glm-4")
    assert (target / "tokenizer.json").read_bytes() == (reference / "tokenizer.json").read_bytes()
