"""The runner's tokenizer: what transformers builds, loaded without transformers.

A rollout runner's cold start used to spend most of its seconds on one step: importing
transformers (1.5-3.5 s of CPU, 6.7 s with four runners on two cores) and building its
tokenizer from tokenizer.json (1.3-2.5 s), to tokenize and render chat templates, nothing
else. Both go: ``compile_tokenizer`` loads a tokenizer once with transformers (the
reference: it is what a policy server tokenizes with) and writes what the runner reads of
it into one JSON file, the *compiled tokenizer*:

- the Rust backend exactly as transformers built it (``backend_tokenizer.to_str()``; for
  some classes, e.g. ``Qwen2Tokenizer``, transformers 5 rebuilds the pre-tokenizer and
  decoder instead of taking tokenizer.json's, so tokenizer.json alone is not the same
  tokenizer),
- the chat template(s), the named special tokens the template sees, the special ids, the
  unknown token's id.

``RunnerTokenizer`` loads that file with the ``tokenizers`` library alone (about 0.4 s)
and renders templates with ``swerollout.chat_jinja``; it offers the part of the
transformers tokenizer API the runner uses, with the same results (tests/swerollout/
test_runner_tokenizer.py holds every bundled tokenizer to that). ``load_runner_tokenizer``
finds a compiled file by a key of the tokenizer's source files and the transformers
version, or compiles one (importing transformers that once) where it can be written.

The image compiles its bundled tokenizers at build time (the Dockerfile), into
``<prefix>/share/swerollout/tokenizers``; a development venv fills the same place on first
use. A tokenizer transformers decodes with clean-up of spaces, or a transformers other than
5.x, is not compiled: the runner then loads it with transformers, as before.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from swerollout import chat_jinja
from swerollout.tokenizers import bundled_tokenizers, load_tokenizer, source_dir

if TYPE_CHECKING:
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerBase

FORMAT = 1
AnyTokenizer: TypeAlias = "RunnerTokenizer | PreTrainedTokenizerBase"
"""What the runner tokenizes with: compiled, or transformers' own where it could not be."""
# The chat_jinja environment is transformers 5's.
_TRANSFORMERS_MAJOR = "5"


def _transformers_version() -> str | None:
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


# Files a tokenizer is built from (the key hashes these only: a model directory also holds weights).
_SOURCE_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer.json.zip",
        "tokenizer_config.json",
        "chat_template.jinja",
        "chat_template.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
        "tokenizer.model",
    }
)


def compiled_dir() -> Path:
    """The installation's compiled tokenizers: filled at image build (read-only at run time),
    and in a development venv on first use. ``$SWEROLLOUT_COMPILED_TOKENIZERS`` overrides it."""
    override = os.environ.get("SWEROLLOUT_COMPILED_TOKENIZERS")
    return Path(override) if override else Path(sys.prefix) / "share" / "swerollout" / "tokenizers"


def compile_key(name_or_path: str) -> str | None:
    """A key of the tokenizer's source files, this format and the transformers version;
    None when no transformers 5 is installed (nothing compiled could be trusted)."""
    version = _transformers_version()
    if version is None or version.split(".")[0] != _TRANSFORMERS_MAJOR:
        return None
    digest = hashlib.sha256(f"{FORMAT}\0{version}\0".encode())
    source = source_dir(name_or_path)
    for path in sorted(p for p in source.iterdir() if p.name in _SOURCE_FILES and p.is_file()):
        digest.update(f"{path.name}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    label = name_or_path if name_or_path in bundled_tokenizers() else "dir"
    return f"{label}-{digest.hexdigest()[:24]}"


def _spec(name_or_path: str, tokenizer: PreTrainedTokenizerBase) -> dict[str, Any] | None:
    """What the runner reads of a transformers tokenizer; None when it cannot be replayed."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return None
    template = getattr(tokenizer, "chat_template", None)
    return {
        "format": FORMAT,
        "transformers": _transformers_version(),
        "name_or_path": name_or_path,
        "chat_template": template if isinstance(template, (str, dict)) else None,
        "special_tokens": {str(k): str(v) for k, v in tokenizer.special_tokens_map.items()},
        "all_special_ids": [int(i) for i in tokenizer.all_special_ids],
        "unk_token_id": tokenizer.unk_token_id,
        "backend": backend.to_str(),
    }


def compile_tokenizer(name_or_path: str, dest: Path) -> Path | None:
    """Compile the tokenizer into ``dest`` (atomically); its path, or None when it cannot be."""
    key = compile_key(name_or_path)
    if key is None:
        return None
    target = dest / f"{key}.json"
    if target.is_file():
        return target
    spec = _spec(name_or_path, load_tokenizer.__wrapped__(name_or_path))
    if spec is None:
        return None
    dest.mkdir(parents=True, exist_ok=True)
    fd, staging = tempfile.mkstemp(prefix=f".{key}-", dir=dest)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        os.chmod(staging, 0o644)  # the image's runner user reads what root compiled
        os.replace(staging, target)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return target


class RunnerTokenizer:
    """A compiled tokenizer: the transformers API the runner uses, served by ``tokenizers``."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        from tokenizers import Tokenizer

        self.name_or_path: str = spec["name_or_path"]
        self.chat_template: str | dict[str, str] | None = spec["chat_template"]
        self.special_tokens_map: dict[str, str] = dict(spec["special_tokens"])
        self.all_special_ids: list[int] = list(spec["all_special_ids"])
        self.unk_token_id: int | None = spec["unk_token_id"]
        self.backend_tokenizer: Tokenizer = Tokenizer.from_str(spec["backend"])
        self.added_tokens_decoder: dict[int, AddedToken] = self.backend_tokenizer.get_added_tokens_decoder()

    @classmethod
    def from_file(cls, path: Path) -> RunnerTokenizer:
        return cls(json.loads(path.read_text()))

    def apply_chat_template(
        self,
        conversation: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        *,
        tokenize: bool = False,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str:
        if tokenize:
            raise ValueError("RunnerTokenizer renders text only (tokenize=False)")
        if self.chat_template is None:
            raise ValueError(f"tokenizer {self.name_or_path!r} has no chat template")
        source = chat_jinja.pick_template(self.chat_template, with_tools=tools is not None)
        return chat_jinja.render(
            source,
            conversation,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            special_tokens=self.special_tokens_map,
            **kwargs,
        )

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: int | Sequence[int], skip_special_tokens: bool = False) -> str:
        listed = [ids] if isinstance(ids, int) else list(ids)
        return str(self.backend_tokenizer.decode(listed, skip_special_tokens=skip_special_tokens))

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> Any:
        """A token per id; one token for one id."""
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [str(self.backend_tokenizer.id_to_token(int(i))) for i in ids]

    def convert_tokens_to_ids(self, tokens: str | Sequence[str]) -> Any:
        """An id per token (None for one not in the vocabulary); one id for one token."""
        if isinstance(tokens, str):
            return self.backend_tokenizer.token_to_id(tokens)
        return [self.backend_tokenizer.token_to_id(t) for t in tokens]

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens_map.get("eos_token")

    @property
    def eos_token_id(self) -> int | None:
        return self.backend_tokenizer.token_to_id(self.eos_token) if self.eos_token is not None else None

    def convert_tokens_to_string(self, tokens: Sequence[str]) -> str:
        decoder = self.backend_tokenizer.decoder
        return str(decoder.decode(list(tokens))) if decoder is not None else " ".join(tokens)


def _writable(directory: Path) -> bool:
    probe = directory if directory.exists() else directory.parent
    while not probe.exists():
        probe = probe.parent
    return os.access(probe, os.W_OK)


@functools.lru_cache(maxsize=8)
def load_runner_tokenizer(name_or_path: str) -> AnyTokenizer:
    """The runner's tokenizer by bundled name or directory: compiled when it can be (found,
    or compiled now where a place is writable), else transformers' own (``load_tokenizer``).
    Shared between callers: do not mutate it."""
    key = compile_key(name_or_path)  # a bad name is UnknownTokenizerError here (source_dir)
    if key is not None:
        compiled = compiled_dir() / f"{key}.json"
        if compiled.is_file():
            return RunnerTokenizer.from_file(compiled)
        # Compiling costs what loading with transformers costs, once per installation; where
        # nothing lasts (a pod's own scratch dir) it would only add the file's round trip.
        if _writable(compiled_dir()):
            path = compile_tokenizer(name_or_path, compiled_dir())
            if path is not None:
                return RunnerTokenizer.from_file(path)
    return load_tokenizer(name_or_path)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m swerollout.runner_tokenizer DEST [NAME...]``: compile tokenizers into DEST
    (the image build; every bundled one when no name is given)."""
    import argparse

    from swerollout.tokenizers import keep_torch_out

    keep_torch_out()
    parser = argparse.ArgumentParser(prog="python -m swerollout.runner_tokenizer")
    parser.add_argument("dest", type=Path)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    for name in args.names or bundled_tokenizers():
        path = compile_tokenizer(name, args.dest)
        print(f"{name}: {path or 'not compiled (loaded with transformers at run time)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
